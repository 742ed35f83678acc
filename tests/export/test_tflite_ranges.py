"""The calibration pass records both ranges of every tensor, and the model outputs'
extremes it records are the float model's own: the output ranges are widened from them
without running the model again."""
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_quantizer", reason="ai-edge-quantizer is not installed")

from export.tflite import _calibrated, output_extremes, signature_inputs  # noqa: E402
from tests.compress.quant.test_tflite_bias_correction import _digits  # noqa: E402

FLOAT = Path(__file__).resolve().parents[1] / "fixtures" / "digits_cnn_fp32.tflite"


def test_recorded_output_extremes_are_the_measured_ones():
    from ai_edge_quantizer import calibrator, quantizer, recipe
    calibration, _ = _digits()
    feeds = [{"image": calibration["image"][i:i + 1]} for i in range(0, 64)]
    name = signature_inputs(FLOAT)[0]
    tracked = _calibrated(quantizer.Quantizer(str(FLOAT), recipe.static_wi8_ai8()), calibrator,
                          FLOAT, [{name: feed["image"]} for feed in feeds])
    recorded, measured = output_extremes(FLOAT, feeds, tracked), output_extremes(FLOAT, feeds, {})
    assert recorded.keys() == measured.keys() and len(recorded) == 1
    for output in recorded:
        np.testing.assert_allclose(recorded[output], measured[output], rtol=1e-6)
    # the moving average sits inside the extremes, and differs from them somewhere
    ranges = [qsv for qsv in tracked.values() if "lowest" in qsv]
    assert ranges and all(np.all(q["lowest"] <= q["min"]) and np.all(q["max"] <= q["highest"])
                          for q in ranges)
    assert any(np.any(q["lowest"] < q["min"]) for q in ranges)
