"""The quantization schemes, a registry like the stages': one frozen config class per
scheme (its own settings, chosen by `scheme:` in the quantize stage) plus the functions
that make it, one per back end, each with one signature:

    onnx(source, target, config, ctx, exclude, shared) -> meta
        onnxruntime on a prepared ONNX file; `exclude`: node names kept in float (the
        accuracy-aware search adds some), `shared`: a dict kept between the search's
        calls on one model (int8-static's calibrated ranges)
    streamed(header, target, config, ctx, exclude, shared) -> meta
        the same, tensor by tensor, for a model too large to hold (compress/quant/streamed.py)
    torch(ctx, artifact, config, target) -> meta
        from a torch model to an ONNX one (PT2E QAT, neural-compressor)

and, for a TFLite source, the ai-edge-quantizer mode the scheme maps to. Adding a scheme
is one module: its config class and `@register_scheme(...)` over its onnx function.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class SchemeSpec:
    name: str
    config_cls: type
    precision: str                        # what the artifact records: int8, int4, fp16
    onnx: Optional[Callable] = None
    streamed: Optional[Callable] = None
    torch: Optional[tuple[str, Callable]] = None   # (module imported first, function)
    tflite_mode: Optional[str] = None     # ai-edge-quantizer's mode for a TFLite source
    searchable: tuple[str, ...] = ()      # op types the accuracy-aware search may keep float


SCHEMES: dict[str, SchemeSpec] = {}


def register_scheme(config_cls: type, precision: str, **backends):
    """Decorator over a scheme's onnx function (or None-returning placeholder for a
    scheme made from torch only): `@register_scheme(Int8Static, "int8", streamed=...)`."""
    name = config_cls.model_fields["scheme"].default

    def decorate(fn: Optional[Callable]):
        SCHEMES[name] = SchemeSpec(name, config_cls, precision, onnx=fn, **backends)
        return fn
    return decorate


# Bias correction when `bias_correction` is unset, ONNX and TFLite alike (docs/int8.md,
# docs/tflite.md): the fast correction, checked on the calibration feeds and kept where it
# helps (on TFLite alongside GPTQ rounding and two range estimators)
DEFAULT_BIAS_METHOD = "checked"


def bias_method(setting) -> Optional[str]:
    """A `bias_correction` setting (unset, true, false, fast, sequential) as the method
    run: None (off), checked, fast or sequential."""
    if setting is None:
        return DEFAULT_BIAS_METHOD
    return {False: None, True: "fast"}.get(setting, setting)


def scheme_of_setting(setting: str) -> list[str]:
    """The schemes that have a setting (for "bias_correction is a setting of ...")."""
    return [name for name, spec in SCHEMES.items() if setting in spec.config_cls.model_fields]
