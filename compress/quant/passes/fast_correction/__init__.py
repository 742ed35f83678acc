"""Bias correction from one pass of the float model as an INT8 pass: each quantized
layer's output mean shift taken off its bias, for the weights it has then (after GPTQ's
rounding, where that ran). On by default; `bias_correction` unset leaves it to the check,
true or fast applies it.

    onnx.py     a QDQ model's Conv / Gemm biases, from float_pass.py's layer means
    tflite.py   a full-int8 .tflite file's int32 biases, exact over its padding
"""
from __future__ import annotations

from compress.quant.passes.base import LAYERS, Int8Pass, Needs, register_pass
from compress.quant.passes.fast_correction import onnx, tflite

FAST_CORRECTION = register_pass(Int8Pass(
    name="fast_correction", when=LAYERS, label="bias", after=("gptq_rounding",),
    on=lambda settings: settings.bias_method() in ("fast", "checked"),
    needs=lambda settings: Needs(layers=True), fitted=True,
    checked=lambda settings: settings.bias_method() == "checked",
    backends={"onnx": onnx.Backend(), "tflite": tflite.Backend()},
    asked=lambda settings: "bias_correction" if settings.bias_method() == "fast" else None))
