"""The float pass int8-static's rounding and correction take, made by the run that also
finds quantize_static's MinMax ranges (float_pass.calibrating_pass): the same ranges as
onnxruntime's own calibration to the bit, the same quantized file, and the same layer
statistics as a pass of its own."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from compress.quant import float_pass
from compress.quant.passes.check import spread
from compress.quant.ranges import write_cache
from tests.compress.quant.test_bias_correction import _int8_static
from tests.compress.quant.test_int8_techniques import _quantize, _Reader, tiny  # noqa: F401


def _onnxruntime_ranges(model_path, feeds, folder) -> dict:
    """{tensor: (lowest, highest)} as quantize_static's MinMax calibrator finds them."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    calibrator = create_calibrator(
        str(model_path), list({*QLinearOpsRegistry, *QDQRegistry}),
        augmented_model_path=str(folder / "augmented.onnx"),
        calibrate_method=CalibrationMethod.MinMax)
    calibrator.collect_data(_Reader(feeds))
    return {name: tuple(float(np.ravel(v)[0]) for v in data.range_value)
            for name, data in calibrator.compute_data().data.items()}


def test_the_calibrating_run_finds_onnxruntimes_ranges_and_the_same_file(tiny, tmp_path):
    """Every tensor onnxruntime calibrates gets the very same float32 range, and
    quantize_static reading them from the cache writes the file it writes calibrating
    for itself, byte for byte."""
    feeds = tiny["calibration"]
    found = float_pass.calibrating_pass(onnx.load(str(tiny["pre"])), feeds,
                                         float_pass.Chosen([0])).minmax()
    theirs = _onnxruntime_ranges(tiny["pre"], feeds, tmp_path)
    assert len(theirs) > 10 and set(theirs) <= set(found)
    for name, (low, high) in theirs.items():
        assert np.float32(found[name][0]) == np.float32(low), name
        assert np.float32(found[name][1]) == np.float32(high), name
    write_cache(found, tmp_path / "ranges.json")
    ours = _quantize(tiny["pre"], tmp_path / "ours.onnx", cache=tmp_path / "ranges.json")
    own = _quantize(tiny["pre"], tmp_path / "own.onnx", feeds)
    assert ours.read_bytes() == own.read_bytes()


def test_the_pass_from_the_calibrating_run_equals_a_pass_of_its_own(tiny, tmp_path):
    """Plain and quantized input means, H and the float outputs on the chosen feeds: the
    calibrating run plus the quantized means' run give what one pass of its own gives
    (the runs differ only in graph optimisations: float32 round-off)."""
    feeds = tiny["calibration"]
    model = onnx.load(str(tiny["pre"]))
    qdq = onnx.load(str(_quantize(tiny["pre"], tmp_path / "int8.onnx", feeds)))
    indices = spread(list(range(len(feeds))), 16)
    chosen = [feeds[i] for i in indices]
    own = float_pass.layer_pass(model, qdq, chosen, hessians=True, outputs=True)
    known = float_pass.calibrating_pass(
        model, feeds, float_pass.Chosen(indices, hessians=True, outputs=True))
    assert known.chosen == indices  # round_and_correct takes the quantized means on these
    taken = known.layer_pass(model, qdq, chosen, hessians=True, outputs=True)
    assert len(taken.pairs) == len(own.pairs) == 8 and taken.skipped == own.skipped
    for a, b in [*zip(taken.plain, own.plain), *zip(taken.quantized, own.quantized)]:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    held = [(a, b) for a, b in zip(taken.hessians, own.hessians) if b is not None]
    assert held and all(a is not None for a, _ in held)
    for a, b in held:  # the same rows drawn: each layer's seed is its place in the graph
        np.testing.assert_allclose(a.mean(), b.mean(), rtol=1e-4, atol=1e-6)
    for a, b in zip(taken.outputs, own.outputs):
        np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("nan", [False, True])
def test_ranges_that_cannot_stand_for_onnxruntimes_are_not_offered(nan):
    """A NaN (or a tensor empty on every feed) follows onnxruntime's own rules: no
    ranges, so quantize_static calibrates for itself."""
    from compress.quant.ranges import TensorStats
    stats = {"a": TensorStats([0.0, -1.0], [2.0, 3.0])}
    if nan:
        stats["b"] = TensorStats([float("nan")], [1.0])
    found = float_pass.Calibrated(stats, {}, {}, None).minmax()
    assert found is None if nan else found == {"a": (-1.0, 3.0)}
    assert float_pass.Calibrated({"a": TensorStats()}, {}, {}, None).minmax() is None


@pytest.mark.parametrize("settings, calibrations", [
    ({}, 0),                                        # the calibrating run stands for it
    ({"calibration": "percentile"}, 1),             # not MinMax: onnxruntime calibrates
    ({"bias_correction": False, "weight_rounding": "nearest"}, 1)])  # no float pass to share
def test_the_stage_calibrates_in_its_float_pass_only_where_it_makes_one(
        project, monkeypatch, settings, calibrations):
    import sys

    import onnxruntime.quantization  # noqa: F401
    # the module, not the function of the same name the package exports
    ort_quantize = sys.modules["onnxruntime.quantization.quantize"]
    made, real = [], ort_quantize.create_calibrator
    monkeypatch.setattr(ort_quantize, "create_calibrator",
                        lambda *a, **k: made.append(1) or real(*a, **k))
    result = _int8_static(project, **settings)
    assert len(made) == calibrations
    assert result.artifacts[-1].meta["calibration_samples"] > 0
