"""The steps int8-static adds around onnxruntime's quantize_static: cross-layer
equalization before it (equalize.py), activation ranges of our own (ranges.py: written
as the calibration cache quantize_static reads), and bias correction after it, fast
(fast_bias.py) or sequential (bias_correction.py). Measured on the conformance corpus:
docs/int8.md."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

# the estimators quantize_static does not have (ranges.py computes them in one pass)
OWN_RANGES = ("mean_minmax", "mse")


def equalized(source: Path, config, folder: Path) -> tuple[Path, dict | None]:
    """`source` equalized into `folder` (the float model quantize_static then takes,
    and bias correction compares with), or `source` itself when not asked."""
    if not config.equalize:
        return source, None
    import onnx

    from compress.quant.equalize import equalize
    model, report = equalize(onnx.load(str(source)))
    target = folder / "equalized.onnx"
    onnx.save(model, str(target))
    return target, dataclasses.asdict(report)


def own_ranges(source: Path, feeds: list[dict], config, cache: Path) -> dict:
    """The ranges of `config.calibration` written to `cache` for quantize_static."""
    from compress.quant.ranges import estimate_ranges
    report = estimate_ranges(source, feeds, config.calibration, cache,
                             threads=os.cpu_count() or 1)
    return {"ranges_seconds": round(report.seconds, 3), "ranges_tensors": report.tensors}


def spread(feeds: list[dict], count: int) -> list[dict]:
    """At most `count` of `feeds`, evenly spread over them (in order)."""
    picks = np.unique(np.linspace(0, len(feeds) - 1, min(count, len(feeds))).astype(int))
    return [feeds[i] for i in picks]


def correct_biases(source: Path, target: Path, feeds: list[dict], config, ctx) -> dict | None:
    """Bias correction of the QDQ model at `target` as config.bias_method() says; what
    went into the artifact's meta (None when off)."""
    method = config.bias_method("onnx")
    if method is None:
        return None
    chosen = spread(feeds, config.bias_correction_samples)
    if method == "sequential":
        from compress.quant.bias_correction import correct_biases as sequential
        with ctx.progress.task(f"bias correction ({len(chosen)} feeds)", None) as advance:
            return {"method": method, **sequential(source, target, chosen,
                                                   threads=os.cpu_count() or 1, advance=advance)}
    from compress.quant.fast_bias import correct_biases_fast
    if method == "fast":
        report = correct_biases_fast(source, target, chosen, threads=os.cpu_count() or 1)
        return {"method": method, **dataclasses.asdict(report)}
    return _checked(source, target, chosen, ctx)


def _checked(source: Path, target: Path, feeds: list[dict], ctx) -> dict:
    """The fast correction kept only where it brings the model's outputs closer to the
    float model's on the calibration feeds: it helped most CNNs of the corpus and cost
    one (ddddocr's detector), and this check told the two apart on all of them."""
    from compress.model_run import run_feeds
    from compress.quant.fast_bias import correct_biases_fast
    from runtimes.metrics import feed_fidelity
    with ctx.progress.task(f"bias correction (fast, {len(feeds)} feeds, checked)", None):
        trial, reference = target.with_name("bias_corrected.onnx"), []
        report = correct_biases_fast(source, target, feeds, out_path=trial,
                                     threads=os.cpu_count() or 1, float_outputs=reference)
        before = feed_fidelity(run_feeds(target, None, feeds), reference)["sqnr_db"]
        after = feed_fidelity(run_feeds(trial, None, feeds), reference)["sqnr_db"]
        kept = after > before
        if kept:
            os.replace(trial, target)
        trial.unlink(missing_ok=True)
    return {"method": "fast", "kept": kept, "sqnr_db_without": round(before, 2),
            "sqnr_db_with": round(after, 2), **dataclasses.asdict(report)}
