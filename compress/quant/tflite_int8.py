"""Full-int8 TFLite files from a float .tflite file: ai-edge-quantizer's quantization,
then GPTQ weight rounding and bias correction, and a check that keeps the candidate
closest to the float model.

The candidates (the default, `bias_correction` unset): each activation range estimator
(export.tflite.RANGES: ai-edge-quantizer's moving average, and the extremes) times the
file as quantized, bias-corrected (fast), GPTQ-rounded, and rounded then corrected. Which
wins depends on the model (docs/tflite.md), so each is run on CHECK_FEEDS calibration
feeds and the one whose outputs have the highest SQNR against the float file's is kept:
the same rule as the ONNX int8-static stage (int8_steps.py).
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from compress.quant.int8_steps import CHECK_FEEDS, spread


@dataclass(frozen=True)
class Int8Settings:
    """What the stage asks of the int8 file."""
    ranges: str                 # a name in export.tflite.RANGES, or "auto": each, checked
    bias_correction: str | None  # checked, fast, sequential, or None (off)
    weight_rounding: str        # nearest or gptq
    samples: int                # calibration feeds for the correction and the rounding


def pairs(settings: Int8Settings) -> list[tuple[str, bool]]:
    """The (rounding, corrected) variants of each quantized file."""
    roundings = ["nearest"] + ["gptq"] * (settings.weight_rounding == "gptq")
    if settings.bias_correction == "checked":
        return [(r, corrected) for r in roundings for corrected in (False, True)]
    return [(settings.weight_rounding, settings.bias_correction == "fast")]


def label(ranges: str, rounding: str, corrected: bool) -> str:
    """A candidate's name in the meta: "minmax+gptq+bias"."""
    return "+".join([ranges] + ["gptq"] * (rounding == "gptq") + ["bias"] * corrected)


def write_int8(fp32: Path, target: Path, calibration: list[dict], settings: Int8Settings,
               ctx) -> dict:
    """Write `target`; what goes into the artifact's meta."""
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".int8-") as folder:
        candidates, report = make_candidates(fp32, calibration, settings, Path(folder),
                                             ctx.progress)
    kept, meta = next(iter(candidates)), {}
    if len(candidates) > 1:
        kept, scores = _checked(fp32, candidates, calibration, target.parent)
        meta["check"] = {"kept": label(*kept), "check_feeds": min(CHECK_FEEDS, len(calibration)),
                         "calibration_sqnr_db": {label(*k): v for k, v in scores.items()}}
    target.write_bytes(candidates[kept])
    meta.update(_meta(settings, report, kept), ranges=kept[0])
    if settings.bias_correction == "sequential":
        meta["bias_correction"] = _sequential(fp32, target, calibration, settings, ctx)
    return meta


def make_candidates(fp32: Path, calibration: list[dict], settings: Int8Settings,
                    folder: Path, progress=None) -> tuple[dict[tuple, bytes], dict]:
    """Every candidate's bytes by (ranges, rounding, corrected), the quantizer's files
    written in `folder`, and the report of the rounding and correction (what was done to
    each candidate in its "candidates"): one float pass serves every range estimator's
    file. `progress`: the run's (its task() shows the pass)."""
    from compress.quant.tflite_fast_bias import variants
    from export.tflite import RANGES, converter_logs_hidden, quantize_int8
    names = list(RANGES) if settings.ranges == "auto" else [settings.ranges]
    files = {name: folder / f"{name}.tflite" for name in names}
    with converter_logs_hidden():
        quantize_int8(fp32, files, calibration)
    wanted = pairs(settings)
    contents = {name: path.read_bytes() for name, path in files.items()}
    if wanted == [("nearest", False)]:
        return {(name, "nearest", False): content for name, content in contents.items()}, {}
    feeds = spread(calibration, settings.samples)
    what = " + ".join(["GPTQ rounding"] * (settings.weight_rounding == "gptq")
                      + ["bias correction"] * (settings.bias_correction in ("checked", "fast")))
    task = progress.task(f"{what} ({' and '.join(files)} ranges), {len(feeds)} feeds", None) \
        if progress else contextlib.nullcontext(lambda n: None)
    with task as advance:
        return variants(fp32.read_bytes(), contents, feeds, wanted,
                        threads=os.cpu_count() or 1, advance=advance)


def _meta(settings: Int8Settings, report: dict, kept: tuple) -> dict:
    """The rounding and correction of the file kept (not of the other candidates)."""
    if not report:
        return {"weight_rounding": {"method": settings.weight_rounding}}
    done = report["candidates"][kept]
    rounded = ({k: done.get(k, 0) for k in ("layers_rounded", "weights_changed")}
               if settings.weight_rounding == "gptq" else {})
    meta = {"weight_rounding": {"method": settings.weight_rounding, **rounded,
                                **{k: report[k] for k in ("rounding_seconds",) if k in report}}}
    if settings.bias_correction in ("checked", "fast"):
        meta["bias_correction"] = {
            "method": settings.bias_correction, "samples": report["samples"],
            "seconds": report.get("seconds"), "layers_corrected": done.get("layers_corrected", 0),
            **{k: done[k] for k in ("largest_mean_shift",) if k in done}}
    return meta


def _checked(fp32: Path, candidates: dict[tuple, bytes], calibration: list[dict],
             folder: Path) -> tuple[tuple, dict[tuple, float]]:
    """The candidate whose outputs are closest to the float file's (SQNR), and every
    candidate's SQNR, on CHECK_FEEDS of the calibration feeds."""
    from compress.model.run import run_feeds
    from runtimes.metrics import feed_fidelity
    feeds = spread(calibration, CHECK_FEEDS)
    reference, scores = run_feeds(fp32, None, feeds), {}
    with tempfile.TemporaryDirectory(dir=folder, prefix=".check-") as scratch:
        for name, content in candidates.items():
            path = Path(scratch) / "candidate.tflite"
            path.write_bytes(content)
            scores[name] = round(feed_fidelity(run_feeds(path, None, feeds), reference)["sqnr_db"], 2)
    return max(scores, key=scores.get), scores


def _sequential(fp32: Path, target: Path, calibration: list[dict], settings: Int8Settings,
                ctx) -> dict:
    """The sequential correction (layer by layer with the int8 model) of the kept file."""
    from compress.quant.tflite_bias_correction import correct_biases
    feeds = spread(calibration, settings.samples)
    with ctx.progress.task(f"bias correction (sequential, {len(feeds)} feeds)", None) as advance:
        report = correct_biases(fp32, target, feeds, threads=os.cpu_count() or 1, advance=advance)
    return {**report, "method": "sequential"}
