"""Sequential bias correction (compress/quant/bias_correction.py,
tflite_bias_correction.py) as an INT8 pass: layer by layer, each measured in the
quantized model with the layers before it corrected, on the model the check kept; it
runs the model itself, so it takes nothing from the float pass. `bias_correction:
sequential`."""
from __future__ import annotations

import os

from compress.quant.passes.base import GRAPH, Int8Pass, register_pass
from compress.quant.passes.check import spread

# the progress line of both formats, with the count of calibration samples
SAID = "bias correction (sequential): one layer at a time, in the int8 model ({} samples)"


class _Onnx:
    record = "bias_correction"

    def apply(self, run) -> dict:
        from compress.quant.bias_correction import correct_biases
        feeds = run.chosen_feeds()
        with run.ctx.progress.task(SAID.format(len(feeds)), None) as advance:
            report = correct_biases(run.source, run.target, feeds, threads=os.cpu_count() or 1,
                                    advance=advance)
        return {"method": "sequential", **report}


class _Tflite:
    record = "bias_correction"

    def apply(self, run) -> dict:
        from compress.quant.tflite.bias_correction import correct_biases
        feeds = spread(run.calibration, run.settings.samples)
        with run.ctx.progress.task(SAID.format(len(feeds)), None) as advance:
            report = correct_biases(run.fp32, run.target, feeds, threads=os.cpu_count() or 1,
                                    advance=advance)
        return {**report, "method": "sequential"}


def _on(settings) -> bool:
    return settings.bias_method() == "sequential"


SEQUENTIAL_CORRECTION = register_pass(Int8Pass(
    name="sequential_correction", when=GRAPH, on=_on, fitted=True,
    backends={"onnx": _Onnx(), "tflite": _Tflite()},
    asked=lambda settings: "bias_correction" if _on(settings) else None))
