"""GPTQ weight rounding as an INT8 pass: the quantized layers' int8 weights rounded against
H = E[x x^T] of their float inputs, the scales left as the quantizer chose them. On by
default (`weight_rounding: gptq`); with `bias_correction` unset the check judges it.

    gptq.py     the algorithm, on arrays (both formats)
    onnx.py     a QDQ model's Conv and Gemm weights; the ONNX backend
    tflite.py   a full-int8 .tflite file's weights, in its bytes; the TFLite backend
"""
from __future__ import annotations

from compress.quant.passes.base import LAYERS, Int8Pass, Needs, register_pass
from compress.quant.passes.gptq_rounding import onnx, tflite


def _asked(settings):
    """Set to gptq on purpose (the default alone is not asked for)."""
    explicit = "weight_rounding" in settings.model_fields_set
    return "weight_rounding gptq" if explicit and settings.weight_rounding == "gptq" else None


GPTQ_ROUNDING = register_pass(Int8Pass(
    name="gptq_rounding", when=LAYERS, label="gptq",
    on=lambda settings: settings.weight_rounding == "gptq",
    needs=lambda settings: Needs(layers=True, hessians=True), fitted=True,
    checked=lambda settings: settings.bias_method() == "checked",
    backends={"onnx": onnx.Backend(), "tflite": tflite.Backend()}, asked=_asked))
