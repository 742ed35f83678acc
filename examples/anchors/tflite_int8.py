"""export.tflite mode int8 on the anchors with a TFLite route (CREPE, EfficientNet-Lite0):
every candidate the stage's check chooses among (each activation range estimator x as
quantized / bias-corrected / GPTQ-rounded / both), judged on the EVALUATION feeds
against the float TFLite file, beside the check's own score on the calibration feeds,
the candidate it kept, and ai-edge-quantizer's defaults; and the stage's wall time.
docs/tflite.md holds its output.

    python examples/anchors/tflite_int8.py [efficientnet crepe] [--set key=value ...]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml

from run import SAMPLES  # noqa: E402  (first: it puts the corpus on the path)
from anchors import ANCHORS, TFLITE_FP32, TFLITE_INT8  # noqa: E402
from tools import quantize_aeq_defaults  # noqa: E402

import compress  # noqa: E402
from compress.runner.checks import resolve_inputs  # noqa: E402
from compress.data.feeds import load_dataset  # noqa: E402
from compress.model.run import run_feeds  # noqa: E402
from compress.quant.schemes import bias_method  # noqa: E402
from compress.quant.passes.tflite_backend import Int8Settings, label, make_candidates  # noqa: E402
from compress.stages.export_tflite import ExportTflite  # noqa: E402
from runtimes.metrics import feed_fidelity  # noqa: E402


def candidates(fp32: Path, calibration: list[dict], folder: Path) -> dict[str, bytes]:
    """Every candidate of the default settings, made as the stage makes them."""
    fields = ExportTflite.model_fields   # the stage's defaults
    settings = Int8Settings(fields["activation_ranges"].default,
                            bias_method(fields["bias_correction"].default),
                            fields["weight_rounding"].default,
                            fields["bias_correction_samples"].default)
    made, _ = make_candidates(fp32, calibration, settings, folder)
    return {label(*key): content for key, content in made.items()}


def measure(name: str, settings: dict) -> str:
    anchor = next(a for a in ANCHORS if a.tflite and name.lower() in a.entry.lower())
    entry = anchor.corpus
    with tempfile.TemporaryDirectory() as folder:
        pipeline = compress.pipeline(name="tflite-int8", output=folder, model=entry.model(),
                                     data=entry.data(),
                                     stages=[TFLITE_FP32, {**TFLITE_INT8, **settings}])
        result = compress.run(pipeline, force=True, quiet=True)
        made = {a.id: (result.run_dir / a.path, a.meta) for a in result.artifacts}
        fp32, (int8, meta) = made["tflite-fp32"][0], made["tflite-int8"]
        resolved = resolve_inputs(pipeline)
        calibration = load_dataset(resolved, "calibration", resolved.model.inputs).take(SAMPLES)
        evaluation = list(load_dataset(resolved, "evaluation", resolved.model.inputs).feeds)
        reference = run_feeds(fp32, None, evaluation)
        files = {"the stage's file": int8}
        if not settings:
            for key, content in candidates(fp32, calibration, Path(folder)).items():
                files[key] = Path(folder) / f"candidate-{key}.tflite"
                files[key].write_bytes(content)
        files["ai-edge-quantizer defaults"] = Path(folder) / "aeq.tflite"
        quantize_aeq_defaults(fp32, calibration, files["ai-edge-quantizer defaults"])
        return _table(entry.name, files, meta, evaluation, reference)


def _table(name: str, files: dict, meta: dict, evaluation: list, reference: list) -> str:
    check = meta.get("check", {})
    scores = check.get("calibration_sqnr_db", {})
    lines = [f"### {name}", "", f"export.tflite int8 stage: {meta['seconds']:.1f} s; kept: "
             f"{check.get('kept', meta.get('ranges'))}", "",
             "| file | check's SQNR (calibration) | SQNR (evaluation) | top-1 agreement | cosine |",
             "|---|---:|---:|---:|---:|"]
    for key, path in files.items():
        found = feed_fidelity(run_feeds(path, None, evaluation), reference)
        lines.append(f"| {key} | {scores[key] if key in scores else '—'} | "
                     f"{found['sqnr_db']:.2f} dB | {found['top1_agreement']:.3f} | "
                     f"{found['cosine']:.5f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=["efficientnet", "crepe"])
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="export.tflite settings (then only the stage's file is judged)")
    args = parser.parse_args()
    settings = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)}
    for name in args.names:
        print(measure(name, settings), flush=True)


if __name__ == "__main__":
    main()
