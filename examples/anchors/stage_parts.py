"""Two parts of the int8-static stage timed on their own, on the same inputs each run:
the float pass (float_pass.layer_pass: layer input means, H for GPTQ, the float outputs
the check compares with) over the stage's 64 feeds, and GPTQ's rounding of every layer
(rounding.round_weights) from that pass. Medians of --repeat runs. The QDQ model they
work on is the stage's own with rounding and correction off. Run `make anchors` first
(stage_time.py's FP32 files); on another checkout, to compare two versions of the code:

    python examples/anchors/stage_parts.py yolov8n efficientnet [--repeat 3]
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time

from stage_time import SAMPLES, _subject  # noqa: E402  (puts the corpus on the path)

import compress  # noqa: E402
from compress.runner.checks import resolve_inputs  # noqa: E402
from compress.data.feeds import load_dataset  # noqa: E402
from compress.quant import float_pass  # noqa: E402
from compress.quant.passes.check import spread  # noqa: E402
from compress.quant.passes.gptq_rounding.onnx import round_weights  # noqa: E402

PASS_FEEDS = 64  # the stage's default bias_correction_samples


def measure(name: str, repeat: int) -> str:
    import onnx
    subject = _subject(name)
    stage = {"type": "quantize", "scheme": "int8-static", "bias_correction": False,
             "weight_rounding": "nearest"}
    with tempfile.TemporaryDirectory() as folder:
        pipeline = compress.pipeline(name="stage-parts", output=folder,
                                     model={"onnx": str(subject.fp32)}, data=subject.data,
                                     stages=[stage])
        result = compress.run(pipeline, force=True, quiet=True)
        qdq = onnx.load(str(result.run_dir / result.artifacts[-1].path))
        resolved = resolve_inputs(pipeline)
        feeds = spread(load_dataset(resolved, "calibration", resolved.model.inputs)
                       .take(SAMPLES), PASS_FEEDS)
        float_model, passes, roundings = onnx.load(str(subject.fp32)), [], []
        for _ in range(repeat):
            started = time.perf_counter()
            seen = float_pass.layer_pass(float_model, qdq, feeds, os.cpu_count() or 1,
                                         hessians=True, outputs=True)
            passes.append(time.perf_counter() - started)
            roundings.append(round_weights(seen, copy.deepcopy(qdq), float_model).seconds)
    return (f"| {subject.name} | {len(feeds)} | {statistics.median(passes):.2f} | "
            f"{statistics.median(roundings):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="anchors whose name contains this")
    parser.add_argument("--repeat", type=int, default=3, metavar="N")
    args = parser.parse_args()
    print(f"medians of {args.repeat} runs\n")
    print("| model | feeds | float pass s | GPTQ rounding s |\n|---|---:|---:|---:|")
    for model in args.models:
        print(measure(model, args.repeat), flush=True)


if __name__ == "__main__":
    main()
