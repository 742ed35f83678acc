"""Bias correction from one pass of the float model (compress/quant/fast_bias.py,
tflite_fast_bias.py) as an INT8 pass: each quantized layer's output mean shift taken off
its bias, for the weights it has then (after GPTQ's rounding, where that ran). On by
default; `bias_correction` unset leaves it to the check, true or fast applies it."""
from __future__ import annotations

from compress.quant.passes.base import LAYERS, Int8Pass, Needs, register_pass


class _Onnx:
    record = "bias_correction"

    def title(self, settings) -> str:
        return "bias correction"

    def apply(self, work) -> dict:
        """Shift the biases of onnx_backend.OnnxLayers `work`."""
        from compress.quant import fast_bias
        largest = fast_bias.shift_biases(work.seen, work.model, work.float_model)
        return {"method": "fast", "layers_corrected": len(work.seen.pairs),
                "feeds": work.feeds, "largest_shift": largest}


class _Tflite:
    def title(self, settings) -> str:
        return "bias correction"

    def apply(self, work) -> dict:
        """Shift the int32 biases of tflite_backend.TfliteLayers `work` in its bytes."""
        if not work.plans:
            return {}
        from compress.quant.tflite.fast_bias import corrected
        return corrected(work.model, work.plans, work.sums, work.weights)


FAST_CORRECTION = register_pass(Int8Pass(
    name="fast_correction", when=LAYERS, label="bias", after=("gptq_rounding",),
    on=lambda settings: settings.bias_method() in ("fast", "checked"),
    needs=lambda settings: Needs(layers=True), fitted=True,
    checked=lambda settings: settings.bias_method() == "checked",
    backends={"onnx": _Onnx(), "tflite": _Tflite()},
    asked=lambda settings: "bias_correction" if settings.bias_method() == "fast" else None))
