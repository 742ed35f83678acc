"""int8-dynamic: int8 weights, activations quantized at run time (onnxruntime's
quantize_dynamic, or tensor by tensor); its settings and its registration."""
from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from compress.quant.schemes.base import Int8Base, NoQnn, OnnxruntimeOnly, streamed
from compress.quant.schemes.registry import register_scheme


class Int8Dynamic(OnnxruntimeOnly, NoQnn, Int8Base):
    scheme: Literal["int8-dynamic"] = Field(
        "int8-dynamic", description="int8-dynamic: weights int8, activations quantized at "
        "run time (MatMul-heavy models)")
    force: bool = Field(False, description="allow int8-dynamic on a convolutional model")
    activation_matmuls: bool = Field(
        False, description="also quantize MatMuls of two activations (a transformer's "
        "attention scores and values), not only those with weights")
    activations: ClassVar[str] = "uint8"   # onnxruntime's dynamic kernels
    weights: ClassVar[str] = "int8"


def _dynamic_streamed(build, config, excluded, ctx, target, shared):
    from compress.quant.ort_int8 import refuse_convolutional
    from compress.quant.streamed.int8 import dynamic
    refuse_convolutional(shared["ops"], config)
    return dynamic(build, config, excluded)


@register_scheme(Int8Dynamic, "int8", 2, streamed=streamed(_dynamic_streamed), tflite_mode="dynamic-int8",
                 searchable=("MatMul", "Gemm"))
def _int8_dynamic(source, target, config, ctx, exclude, shared):
    from compress.quant.ort_int8 import quantize_dynamic_int8
    return quantize_dynamic_int8(source, target, config, shared["ops"], exclude)
