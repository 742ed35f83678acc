"""GPTQ weight rounding (compress/quant/rounding.py, tflite_rounding.py) as an INT8 pass:
the quantized layers' int8 weights rounded against H = E[x x^T] of their float inputs,
the scales left as the quantizer chose them. On by default (`weight_rounding: gptq`);
with `bias_correction` unset the check judges it."""
from __future__ import annotations

from compress.quant.passes.base import LAYERS, Int8Pass, Needs, register_pass


class _Onnx:
    record = "bias_correction"   # ONNX records what was done to the layers in one place
    # made in a second thread while the check scores the candidates without it (GPTQ is
    # the costly pass: 0.3-1.6 s on the corpus' CNNs), then scored once
    beside_check = True

    def title(self, settings) -> str:
        return "GPTQ rounding"

    def apply(self, work) -> dict:
        """Round the weights of onnx_backend.OnnxLayers `work`; its layer statistics then
        hold the new W_q, so a bias correction after it corrects the rounded weights."""
        from compress.quant.rounding import round_weights
        report = round_weights(work.seen, work.model, work.float_model)
        return {"layers_rounded": report.layers_rounded,
                "weights_changed": report.weights_changed,
                "rounding_seconds": round(report.seconds, 3)}


class _Tflite:
    def title(self, settings) -> str:
        return "GPTQ rounding"

    def apply(self, work) -> dict:
        """Round the weights of tflite_backend.TfliteLayers `work` in its bytes; its plans
        then hold the new integers."""
        from compress.quant.tflite.rounding import round_weights
        work.plans, report = round_weights(work.model, work.plans, work.hessians, work.weights,
                                           work.memo)
        work.seconds += report.seconds
        return {"layers_rounded": report.layers_rounded,
                "weights_changed": report.weights_changed}


def _asked(settings):
    """Set to gptq on purpose (the default alone is not asked for)."""
    explicit = "weight_rounding" in settings.model_fields_set
    return "weight_rounding gptq" if explicit and settings.weight_rounding == "gptq" else None


GPTQ_ROUNDING = register_pass(Int8Pass(
    name="gptq_rounding", when=LAYERS, label="gptq",
    on=lambda settings: settings.weight_rounding == "gptq",
    needs=lambda settings: Needs(layers=True, hessians=True), fitted=True,
    checked=lambda settings: settings.bias_method() == "checked",
    backends={"onnx": _Onnx(), "tflite": _Tflite()}, asked=_asked))
