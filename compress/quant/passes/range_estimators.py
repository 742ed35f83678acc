"""Activation ranges of our own estimators (compress/quant/ranges.py: mean_minmax, mse),
which quantize_static does not have, as an INT8 pass: one float run of their own over the
calibration feeds, written as the calibration cache quantize_static reads; ONNX only (a
TFLite model's estimators are ai-edge-quantizer's: tflite_backend.py). Asked for with
`calibration: mean_minmax` or `mse`."""
from __future__ import annotations

import os

from compress.quant.passes.base import RANGES, Int8Pass, register_pass

OWN_RANGES = ("mean_minmax", "mse")


class _Onnx:
    def ranges(self, run, cache) -> dict:
        """The ranges of `calibration` written to `cache` for quantize_static."""
        from compress.quant.ranges import estimate_ranges
        report = estimate_ranges(run.source, run.feeds, run.settings.calibration, cache,
                                 threads=os.cpu_count() or 1)
        return {"ranges_seconds": round(report.seconds, 3), "ranges_tensors": report.tensors}


def _on(settings) -> bool:
    return settings.calibration in OWN_RANGES


RANGE_ESTIMATORS = register_pass(Int8Pass(
    name="range_estimators", when=RANGES, on=_on, backends={"onnx": _Onnx()},
    asked=lambda settings: f"calibration {settings.calibration}" if _on(settings) else None))
