"""Post-training quantization of a float .tflite file with ai-edge-quantizer: fp16
weights, dynamic-range int8 (int8 weights, float activations) or full int8 calibrated
on data.calibration (then bias-corrected against the float file). Shared by
export.tflite, after converting a torch model, and quantize, for a TFLite source."""
from __future__ import annotations

import os
from pathlib import Path

from compress.errors import ModelError


def calibration_feeds(ctx, samples: int, channels_last: bool, purpose: str) -> list[dict]:
    """Up to `samples` calibration feeds, in the file's layout (NHWC where the torch
    model's NCHW images were turned channels-last)."""
    data = ctx.require_dataset("calibration", purpose)
    feeds = data.take(samples)
    if channels_last:
        feeds = [{k: v.transpose(0, 2, 3, 1) if v.ndim == 4 else v for k, v in feed.items()}
                 for feed in feeds]
    return feeds


def _bias_correction(fp32: Path, target: Path, calibration: list[dict], samples: int,
                     ctx, method: str) -> dict:
    """fast: one pass of the float model (tflite_fast_bias.py); sequential: layer by
    layer with the int8 model (tflite_bias_correction.py)."""
    from compress.quant.int8_steps import spread
    if method == "sequential":
        from compress.quant.tflite_bias_correction import correct_biases
    else:
        from compress.quant.tflite_fast_bias import correct_biases_fast as correct_biases
    feeds = spread(calibration, samples)
    with ctx.progress.task(f"bias correction ({method}, {len(feeds)} feeds)", None) as advance:
        report = correct_biases(fp32, target, feeds, threads=os.cpu_count() or 1, advance=advance)
    return {**report, "method": method}


def check_full_int8(report: dict) -> None:
    if report["float32_tensors"]:
        names = ", ".join(report["float32_tensors"][:8])
        raise ModelError(f"full int8 was promised, but {len(report['float32_tensors'])} "
                         f"tensors stayed float32 ({names}); those ops have no int8 kernel in "
                         "TFLite: use dynamic-range int8, or the ONNX INT8 path")


def quantize_file(fp32: Path, target: Path, mode: str, ctx, settings: dict) -> dict:
    """Write `target`, the `mode` (fp16 | dynamic-int8 | int8) quantization of `fp32`.
    `settings`: samples, channels_last, bias_correction (the method, fast or
    sequential, or None), bias_correction_samples and purpose (for messages). Returns
    what goes into the artifact's meta."""
    from export.tflite import converter_logs_hidden, quantize, tensor_report
    calibration = None
    if mode == "int8":
        calibration = calibration_feeds(ctx, settings["samples"], settings["channels_last"],
                                        settings["purpose"])
    with converter_logs_hidden():
        quantize(fp32, target, mode, calibration)
    meta = {}
    if mode == "int8" and settings["bias_correction"]:  # outside: it shows progress
        meta["bias_correction"] = _bias_correction(
            fp32, target, calibration, settings["bias_correction_samples"], ctx,
            settings["bias_correction"])
    with converter_logs_hidden():
        meta["tensors"] = tensor_report(target)
    if mode == "int8":
        check_full_int8(meta["tensors"])
        meta["calibration_samples"] = len(calibration)
    return meta


def parity(path: Path, feeds: list[dict], reference: list, channels_last: bool) -> dict:
    """Fidelity (overall, the worst output) of the file's outputs to `reference`."""
    from compress.model_run import run_feeds
    from runtimes.metrics import feed_fidelity
    return feed_fidelity(run_feeds(path, None, feeds, nhwc=channels_last), reference)


def quantize_stage(artifact, config, ctx, mode: str, precision: str):
    """A TFLite model quantized by ai-edge-quantizer, checked against the float file."""
    source, target = ctx.path(artifact), ctx.out_dir / "model.tflite"
    ctx.progress.note(f"quantizing the TFLite model ({mode}, ai-edge-quantizer)")
    calibrated = {"samples": config.samples,  # full int8 only (int8-static)
                  "bias_correction_samples": config.bias_correction_samples} \
        if mode == "int8" else {}
    meta = quantize_file(source, target, mode, ctx, {
        **calibrated, "channels_last": False,
        "bias_correction": config.bias_method("tflite"),
        "purpose": f"quantize {config.scheme} of a TFLite model"})
    from compress.artifacts import Output
    from compress.model_run import run_feeds
    feeds, _ = ctx.sample_feeds(32)
    agreement = parity(target, feeds, run_feeds(source, ctx.inputs, feeds), False)
    meta.update(scheme=config.scheme, mode=mode,
                parity={"worst": {"output": "worst", **{k: v for k, v in agreement.items()
                                                        if k != "outputs"}}})
    return [Output(target, "tflite", precision, meta)]
