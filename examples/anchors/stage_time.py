"""The int8-static stage's wall time beside quant_pre_process + quantize_static by hand,
on the same FP32 ONNX file and the same 256 calibration feeds, one anchor at a time
(run `make anchors` first: the torch models' FP32 files come from its run folders).

    python examples/anchors/stage_time.py efficientnet [yolov8n ...]
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from anchors import ANCHORS, REPO  # noqa: E402  (puts the corpus on the path)

import compress  # noqa: E402
from by_hand import quantize_by_hand  # noqa: E402
from compress.checks import resolve_inputs  # noqa: E402
from compress.data import load_dataset  # noqa: E402

RUNS = REPO / "runs" / "anchors"


def measure(name: str) -> str:
    anchor = next(a for a in ANCHORS if name.lower() in a.entry.lower())
    entry = anchor.corpus
    slug = "".join(c if c.isalnum() else "-" for c in entry.name.lower()).strip("-")
    fp32 = (RUNS / slug / "01-fp32" / "model.onnx" if entry.fp32 == "fp32"
            else Path(entry.model()["onnx"]))
    with tempfile.TemporaryDirectory() as folder:
        pipeline = compress.pipeline(name="stage-time", output=folder, model={"onnx": str(fp32)},
                                     data=entry.data(), stages=[{"type": "quantize",
                                                                 "scheme": "int8-static"}])
        resolved = resolve_inputs(pipeline)
        feeds = load_dataset(resolved, "calibration", resolved.model.inputs).take(256)
        started = time.perf_counter()
        quantize_by_hand(fp32, feeds, Path(folder) / "by_hand.onnx")
        by_hand = time.perf_counter() - started
        result = compress.run(pipeline, force=True, quiet=True)
        stage = result.artifacts[-1].meta["seconds"]
        kept = result.artifacts[-1].meta.get("bias_correction", {}).get("kept")
    return f"| {entry.name} | {by_hand:.1f} | {stage:.1f} | {stage / by_hand:.2f}x | {kept} |"


if __name__ == "__main__":
    print("| model | by hand s | int8-static stage s | ratio | kept |\n|---|---:|---:|---:|---|")
    for model in sys.argv[1:]:
        print(measure(model), flush=True)
