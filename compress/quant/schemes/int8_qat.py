"""int8-qat: quantization-aware training of a torch model (PT2E), exported to ONNX; its
settings and its registration (a torch back end only)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from compress.model.training import TrainSettings
from compress.quant.schemes.base import FromTorch, QuantizeBase
from compress.quant.schemes.registry import register_scheme


class Int8Qat(FromTorch, QuantizeBase):
    scheme: Literal["int8-qat"] = Field(
        "int8-qat", description="int8-qat: quantization-aware training of a torch model "
        "(PT2E), exported to ONNX")
    train: TrainSettings = Field(
        default_factory=lambda: TrainSettings(epochs=3, lr=1e-4),
        description="fine-tuning with fake quantization on data.train")

    def required_data(self) -> tuple[str, ...]:
        return ("train",)


def _qat(ctx, artifact, config, target):
    from compress.quant.qat import int8_qat
    return int8_qat(ctx, artifact, config, target)


register_scheme(Int8Qat, "int8", 4, torch=("torchao.quantization.pt2e", _qat))(None)
