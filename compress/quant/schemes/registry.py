"""The registry of quantization schemes: what each scheme's module records with
`register_scheme` (its settings class, precision and back ends), in the order the
quantize stage's union and `compress schema` list them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class SchemeSpec:
    name: str
    config_cls: type
    precision: str                        # what the artifact records: int8, int4, fp16
    listed: int                           # its place in the stage's union and the schema
    onnx: Optional[Callable] = None
    streamed: Optional[Callable] = None
    torch: Optional[tuple[str, Callable]] = None   # (module imported first, function)
    tflite_mode: Optional[str] = None     # ai-edge-quantizer's mode for a TFLite source
    searchable: tuple[str, ...] = ()      # op types the accuracy-aware search may keep float
    lm: Optional[Callable] = None         # a language model's: (artifact, config, ctx) -> outputs


# in the order of `listed`, whatever the order the scheme modules are imported in
SCHEMES: dict[str, SchemeSpec] = {}


def register_scheme(config_cls: type, precision: str, listed: int, **backends):
    """Decorator over a scheme's onnx function (None for a scheme made from torch only):
    `@register_scheme(Int8Static, "int8", 1, streamed=...)`."""
    name = config_cls.model_fields["scheme"].default

    def decorate(fn: Optional[Callable]):
        SCHEMES[name] = SchemeSpec(name, config_cls, precision, listed, onnx=fn, **backends)
        ordered = sorted(SCHEMES.values(), key=lambda spec: spec.listed)
        SCHEMES.clear()
        SCHEMES.update((spec.name, spec) for spec in ordered)
        return fn
    return decorate


def scheme_configs() -> tuple[type, ...]:
    """Every scheme's settings class, in the order the stage's union lists them."""
    return tuple(spec.config_cls for spec in SCHEMES.values())


def scheme_of_setting(setting: str) -> list[str]:
    """The schemes that have a setting (for "bias_correction is a setting of ...")."""
    return [name for name, spec in SCHEMES.items() if setting in spec.config_cls.model_fields]
