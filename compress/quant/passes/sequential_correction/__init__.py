"""Sequential bias correction as an INT8 pass: layer by layer, each measured in the
quantized model with the layers before it corrected, on the model the check kept; it
runs the model itself, so it takes nothing from the float pass. `bias_correction:
sequential`.

    onnx.py     a QDQ model's Conv / Gemm biases, the quantized model run per layer
    tflite.py   a full-int8 .tflite file's int32 biases, over the elements neither model clipped
    in_turn.py  what both share: the run layer after layer, under one progress line
"""
from __future__ import annotations

from compress.quant.passes.base import GRAPH, Int8Pass, register_pass
from compress.quant.passes.sequential_correction import onnx, tflite


def _on(settings) -> bool:
    return settings.bias_method() == "sequential"


SEQUENTIAL_CORRECTION = register_pass(Int8Pass(
    name="sequential_correction", when=GRAPH, on=_on, fitted=True,
    backends={"onnx": onnx.Backend(), "tflite": tflite.Backend()},
    asked=lambda settings: "bias_correction" if _on(settings) else None))
