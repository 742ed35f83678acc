"""int4-weight-only: 4-bit block-wise MatMul (and embedding) weights, float activations
(onnxruntime's MatMulNBits, or neural-compressor from a torch model); its settings and
its registration."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, PositiveInt, field_validator, model_validator

from compress.quant.schemes.base import (NoQnn, Searchable, backend_field, neural_compressor,
                                         streamed)
from compress.quant.schemes.registry import register_scheme


class Int4WeightOnly(NoQnn, Searchable):
    scheme: Literal["int4-weight-only"] = Field(
        "int4-weight-only", description="int4-weight-only: 4-bit block-wise MatMul (and "
        "embedding) weights, float activations")
    backend: Literal["onnxruntime", "neural-compressor"] = backend_field()
    block_size: int = Field(32, description="weights per scale (a power of 2, >= 16)")
    symmetric: bool = Field(False, description="symmetric blocks (no zero point); "
                            "asymmetric kept MiniLM closer to FP32")
    algorithm: Literal["rtn", "hqq", "gptq", "awq"] = Field(
        "rtn", description="round-to-nearest; hqq (onnxruntime: half-quadratic, no data "
        "needed); gptq or awq (neural-compressor, calibrated on data.calibration)")
    samples: PositiveInt = Field(256, description="gptq/awq: calibration samples (at most)")
    accuracy_level: Optional[Literal[0, 1, 2, 3, 4]] = Field(
        None, description="MatMulNBits compute type (4: int8 compute, fastest on x86; 0/1: "
        "float32)")
    quantize_embeddings: Optional[bool] = Field(
        None, description="also quantize Gather embedding tables (GatherBlockQuantized); "
        "default: yes, except with hqq (onnxruntime's HQQ cannot)")

    @field_validator("block_size")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value < 16 or value & (value - 1):
            raise ValueError("block_size must be a power of 2 of at least 16 (16, 32, 64, 128)")
        return value

    @property
    def embeddings_quantized(self) -> bool:
        return self.algorithm != "hqq" if self.quantize_embeddings is None else self.quantize_embeddings

    def required_data(self) -> tuple[str, ...]:
        calibrated = ("calibration",) if self.algorithm in ("gptq", "awq") else ()
        return calibrated + super().required_data()

    @model_validator(mode="after")
    def _fits_backend(self):
        offered = {"onnxruntime": ("rtn", "hqq"), "neural-compressor": ("rtn", "gptq", "awq")}
        if self.algorithm not in offered[self.backend]:
            raise ValueError(f"algorithm {self.algorithm} is not offered by backend "
                             f"{self.backend} (it offers {', '.join(offered[self.backend])})")
        if self.algorithm == "hqq" and self.quantize_embeddings:
            raise ValueError("onnxruntime's HQQ quantizer cannot quantize embeddings (Gather); "
                             "set quantize_embeddings: false, or use algorithm: rtn")
        if self.backend == "neural-compressor" and self.max_drop is not None:
            raise ValueError("max_drop with backend neural-compressor is its autotune, which "
                             "tunes int8-static; for int4 use backend onnxruntime")
        if self.backend == "neural-compressor" and self.static_shapes:
            raise ValueError("static_shapes: for backend onnxruntime, which quantizes the "
                             "ONNX model (neural-compressor exports from torch)")
        return self

    def graph_meta(self, source, target) -> dict:
        from compress.quant.int4 import weight_precision
        return {"weights": weight_precision(source, target)}

    def streaming_refusal(self) -> Optional[str]:
        return None if self.algorithm == "rtn" else f"algorithm {self.algorithm}"


def _int4_streamed(build, config, excluded, *_):
    from compress.quant.streamed.int4 import int4
    return int4(build, config, excluded)


@register_scheme(Int4WeightOnly, "int4", 3, streamed=streamed(_int4_streamed),
                 searchable=("MatMul", "Gemm"),
                 torch=neural_compressor("int4_weight_only"))
def _int4(source, target, config, ctx, exclude, shared):
    from compress.quant.int4 import quantize_int4
    return quantize_int4(source, target, config, exclude)
