"""fp16: half-precision weights and compute for GPU targets (onnxruntime's float16
converter, ai-edge-quantizer for a TFLite model); its settings and its registration."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from compress.quant.schemes.base import NoQnn, NoSearch, OnnxruntimeOnly, OnnxShapes
from compress.quant.schemes.registry import register_scheme


class Fp16(OnnxruntimeOnly, NoSearch, NoQnn, OnnxShapes):
    scheme: Literal["fp16"] = Field(
        "fp16", description="fp16: half-precision weights and compute (GPU targets)")
    keep_io_types: bool = Field(True, description="keep float32 inputs and outputs")


@register_scheme(Fp16, "fp16", 5, tflite_mode="fp16")
def _fp16(source, target, config, ctx, exclude, shared):
    from compress.quant.fp16 import convert_fp16
    return convert_fp16(source, target, config)
