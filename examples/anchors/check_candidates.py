"""Every candidate of the int8-static check, as the stage scored it on its calibration
feeds beside its fidelity on the evaluation feeds it never saw: how far the check's
ranking can be trusted, and what the margin a fitted candidate must win by
(onnx_backend.FIT_MARGIN_DB) keeps or throws away. Run `make anchors` first: the torch
models' FP32 files come from its run folders.

    python examples/anchors/check_candidates.py orientation yolov8n crepe efficientnet
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from run import SAMPLES  # noqa: E402,F401  (puts the corpus on the path)
from stage_time import _subject  # noqa: E402

import compress  # noqa: E402
from compress.runner.checks import resolve_inputs  # noqa: E402
from compress.data.feeds import load_dataset  # noqa: E402
from compress.model.run import run_feeds  # noqa: E402
from compress.quant.passes import onnx_backend  # noqa: E402
from runtimes.metrics import feed_fidelity  # noqa: E402


def candidates(name: str) -> str:
    """The stage run once with its candidates kept as scored; each judged after."""
    subject, scored = _subject(name), {}
    real = onnx_backend._scores

    def keep(models: dict, *rest):
        scored.update(models)
        return real(models, *rest)
    onnx_backend._scores = keep
    try:
        with tempfile.TemporaryDirectory() as folder:
            pipeline = compress.pipeline(
                name="check-candidates", output=folder, model={"onnx": str(subject.fp32)},
                data=subject.data, stages=[{"type": "quantize", "scheme": "int8-static"}])
            meta = compress.run(pipeline, force=True, quiet=True).artifacts[-1].meta
            resolved = resolve_inputs(pipeline)
            evaluation = list(load_dataset(resolved, "evaluation", resolved.model.inputs).feeds)
            reference = run_feeds(subject.fp32, None, evaluation)
            cells = []
            for label, model in scored.items():
                path = Path(folder) / "candidate.onnx"
                path.write_bytes(model)
                judged = feed_fidelity(run_feeds(path, None, evaluation), reference)
                top1 = f", top-1 {judged['top1_agreement']:.3f}" if subject.classifier else ""
                check = meta["bias_correction"]["calibration_sqnr_db"][label]
                cells.append(f"{label}: {check:.2f} / {judged['sqnr_db']:.2f}{top1}")
    finally:
        onnx_backend._scores = real
    return f"| {subject.name} | {'; '.join(cells)} | {meta['bias_correction']['kept']} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="anchors whose name contains this")
    args = parser.parse_args()
    print(f"margin a fitted candidate must win the check by: {onnx_backend.FIT_MARGIN_DB} dB\n\n"
          "| model | candidate: check dB / evaluation dB | kept |\n|---|---|---|")
    for name in args.models:
        print(candidates(name), flush=True)


if __name__ == "__main__":
    main()
