"""Post-training quantization of a float .tflite file with ai-edge-quantizer: fp16
weights, dynamic-range int8 (int8 weights, float activations) or full int8 calibrated
on data.calibration (then GPTQ-rounded, bias-corrected and checked: the INT8 passes'
TFLite backend, passes/tflite_backend.py). Shared by export.tflite, after converting a
torch model, and quantize, for a TFLite source."""
from __future__ import annotations

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


def check_full_int8(report: dict) -> None:
    if report["float32_tensors"]:
        names = ", ".join(report["float32_tensors"][:8])
        raise ModelError(f"full int8 was promised, but {len(report['float32_tensors'])} "
                         f"tensors stayed float32 ({names}); those ops have no int8 kernel in "
                         "TFLite: use dynamic-range int8, or the ONNX INT8 path")


def quantize_file(fp32: Path, target: Path, mode: str, ctx, settings: dict) -> dict:
    """Write `target`, the `mode` (fp16 | dynamic-int8 | int8) quantization of `fp32`.
    `settings`: samples, channels_last and purpose (for messages); for int8 also
    `int8`, a passes.tflite_backend.Int8Settings. Returns what goes into the artifact's meta."""
    from export.tflite import converter_logs_hidden, quantize, tensor_report
    meta = {}
    if mode == "int8":
        from compress.quant.passes.tflite_backend import write_int8
        calibration = calibration_feeds(ctx, settings["samples"], settings["channels_last"],
                                        settings["purpose"])
        meta.update(write_int8(fp32, target, calibration, settings["int8"], ctx))
    else:
        with converter_logs_hidden():
            quantize(fp32, target, mode)
    with converter_logs_hidden():
        meta["tensors"] = tensor_report(target)
    if mode == "int8":
        check_full_int8(meta["tensors"])
        meta["calibration_samples"] = len(calibration)
    return meta


def parity(path: Path, feeds: list[dict], reference: list, channels_last: bool) -> dict:
    """Fidelity (overall, the worst output) of the file's outputs to `reference`."""
    from compress.model.run import run_feeds
    from runtimes.metrics import feed_fidelity
    return feed_fidelity(run_feeds(path, None, feeds, nhwc=channels_last), reference)


def quantize_stage(artifact, config, ctx, mode: str, precision: str):
    """A TFLite model quantized by ai-edge-quantizer, checked against the float file."""
    source, target = ctx.path(artifact), ctx.out_dir / "model.tflite"
    ctx.progress.note(f"quantizing the TFLite model ({mode}, ai-edge-quantizer)")
    settings = {"channels_last": False, "purpose": f"quantize {config.scheme} of a TFLite model"}
    if mode == "int8":  # int8-static
        from compress.quant.passes.tflite_backend import Int8Settings
        settings.update(samples=config.samples, int8=Int8Settings(
            _ranges(config), config.bias_method(), config.weight_rounding,
            config.bias_correction_samples))
    meta = quantize_file(source, target, mode, ctx, settings)
    from compress.core.artifacts import Output
    from compress.model.run import run_feeds
    feeds, _ = ctx.sample_feeds(32)
    agreement = parity(target, feeds, run_feeds(source, ctx.inputs, feeds), False)
    meta.update(scheme=config.scheme, mode=mode,
                parity={"worst": {"output": "worst", **{k: v for k, v in agreement.items()
                                                        if k != "outputs"}}})
    return [Output(target, "tflite", precision, meta)]


# int8-static's `calibration` on a TFLite model: ai-edge-quantizer computes min and max
# only, so the two estimators made of those are what it can take
TFLITE_RANGES = {"minmax": "minmax", "mean_minmax": "average"}


def _ranges(config) -> str:
    """The activation ranges of a TFLite source: both checked (export.tflite.RANGES)
    unless `calibration` is set."""
    if "calibration" not in config.model_fields_set:
        return "auto"
    if config.calibration not in TFLITE_RANGES:
        from compress.errors import ConfigError
        raise ConfigError(f"calibration: {config.calibration} is for ONNX models; a TFLite "
                          f"model takes {' or '.join(TFLITE_RANGES)}, or leave it unset "
                          "(both tried, the better kept)")
    return TFLITE_RANGES[config.calibration]
