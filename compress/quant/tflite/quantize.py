"""Post-training quantization of a float .tflite file with ai-edge-quantizer: fp16
weights, dynamic-range int8 (int8 weights, float activations) or full int8 calibrated
on data.calibration (then GPTQ-rounded, bias-corrected and checked: the INT8 passes'
TFLite backend, passes/tflite_backend.py). Shared by export.tflite, after converting a
torch model, and quantize, for a TFLite source, which is first rewritten into the form
the quantizer takes (tflite_normalise.py). Full int8 keeps the ops the quantizer leaves
in float (PRELU) in float: a mixed file, its float ops listed in the meta."""
from __future__ import annotations

import tempfile
from pathlib import Path

from compress.core.library_errors import blame_library
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


def int8_coverage(path: Path, report: dict) -> dict[str, int]:
    """The ops ai-edge-quantizer left in float32 (it has no int8 for PRELU), by name and
    count: the mixed file is kept, as the quantizer run by hand leaves it, and the meta
    lists them. Only a file in which no op at all became int8 is refused."""
    from compress.quant.tflite.graph import float_ops
    left = float_ops(path.read_bytes()) if report["float32_tensors"] else {}
    if left and not report["dtypes"].get("int8"):
        raise ModelError(f"ai-edge-quantizer quantized none of the model's ops to int8 (float: "
                         f"{', '.join(left)}); use dynamic-range int8, or the ONNX INT8 path")
    return left


# the quantizer (or the interpreter it calibrates with) failing inside itself on the
# user's graph is the model's problem: exit 2, not a bug
@blame_library("ai-edge-quantizer", "LiteRT", what="ai_edge_quantizer's Quantizer",
               hint="another mode (export.tflite's `mode`: dynamic-int8, fp16; the quantize "
               "stage's `scheme`: int8-dynamic, fp16), or the ONNX path (export.onnx, then "
               "quantize)")
def quantize_file(fp32: Path, target: Path, mode: str, ctx, settings: dict) -> dict:
    """Write `target`, the `mode` (fp16 | dynamic-int8 | int8) quantization of `fp32`.
    `settings`: samples, channels_last and purpose (for messages); for int8 also
    `int8`, a passes.tflite_backend.Int8Settings. Returns what goes into the artifact's
    meta; for int8 `float_ops`, the ops left in float32 (none: full int8)."""
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
        meta["float_ops"] = int8_coverage(target, meta["tensors"])
        meta["calibration_samples"] = len(calibration)
    return meta


def parity(path: Path, feeds: list[dict], reference: list, channels_last: bool) -> dict:
    """Fidelity (overall, the worst output) of the file's outputs to `reference`."""
    from compress.model.run import run_feeds
    from runtimes.metrics import feed_fidelity
    return feed_fidelity(run_feeds(path, None, feeds, nhwc=channels_last), reference)


def quantize_stage(artifact, config, ctx, mode: str, precision: str):
    """A TFLite model quantized by ai-edge-quantizer, checked against the float file. The
    file is first rewritten, in a copy, into the form the quantizer takes (as apps ship
    files: tflite_normalise.py); what changed is in the meta's `normalised`."""
    source, target = ctx.path(artifact), ctx.out_dir / "model.tflite"
    ctx.progress.note(f"quantizing the TFLite model ({mode}, ai-edge-quantizer)")
    settings = {"channels_last": False, "purpose": f"quantize {config.scheme} of a TFLite model"}
    if mode == "int8":  # int8-static
        from compress.quant.passes.tflite_backend import Int8Settings
        settings.update(samples=config.samples, int8=Int8Settings(
            _ranges(config), config.bias_method(), config.weight_rounding,
            config.bias_correction_samples, config.floor_db, config.recover))
    with tempfile.TemporaryDirectory(dir=ctx.out_dir, prefix=".normalise-") as folder:
        normalised = _normalised(source, Path(folder) / "model.tflite", mode)
        meta = quantize_file(normalised.path, target, mode, ctx, settings)
    if normalised.record.changed():
        meta["normalised"] = normalised.record.as_meta()
    from compress.core.artifacts import Output
    from compress.model.run import run_feeds
    feeds, _ = ctx.sample_feeds(32)
    agreement = parity(target, feeds, run_feeds(source, ctx.inputs, feeds), False)
    meta.update(scheme=config.scheme, mode=mode,
                parity={"worst": {"output": "worst", **{k: v for k, v in agreement.items()
                                                        if k != "outputs"}}})
    return [Output(target, "tflite", precision, meta)]


def _normalised(source: Path, copy: Path, mode: str):
    """The source as ai-edge-quantizer takes it. A custom op no builtin replaces runs only
    inside a LiteRT delegate, and full int8's calibration runs without delegates."""
    from compress.quant.tflite.normalise import normalise
    normalised = normalise(source, copy)
    kept = normalised.record.custom_ops_kept
    if mode == "int8" and kept:
        raise ModelError(f"the custom op(s) {', '.join(kept)} run only inside a LiteRT "
                         "delegate (XNNPACK), and ai-edge-quantizer calibrates full int8 "
                         "without delegates: use int8-dynamic or fp16 for this file")
    return normalised


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
