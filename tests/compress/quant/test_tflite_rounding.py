"""GPTQ rounding of a full-int8 TFLite file, on the committed digits CNN fixtures (a
depthwise conv, two convs, a fully connected layer): the rows H is made of are the
layer's real input patches in its weight's order, rounding lowers each layer's output
error, and only the weights' integers change."""
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed")

from compress.quant import hessian  # noqa: E402
from compress.quant.passes.tflite_backend import Int8Settings, label, pairs  # noqa: E402
from compress.quant.passes.tflite_candidates import correct_biases_fast, variants  # noqa: E402
from compress.quant.passes.fast_correction.tflite import plans as _plans  # noqa: E402
from compress.quant.tflite.graph import (ACTIVATION_RANGE, buffer_views,  # noqa: E402
                                         correctable_layers)
from compress.quant.tflite.graph import interpreter as _interpreter  # noqa: E402
from compress.quant.tflite.graph import invoke as _invoke  # noqa: E402
from compress.quant.tflite.graph import schema as _schema  # noqa: E402
from compress.quant.passes.gptq_rounding.tflite import (_by_outputs, _geometry, _in_layout,  # noqa: E402
                                            as_rows_input)
from tests.compress.quant.test_tflite_bias_correction import _accuracy, _digits  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FLOAT, INT8 = FIXTURES / "digits_cnn_fp32.tflite", FIXTURES / "digits_cnn_int8.tflite"


class _InOrder:
    """An rng whose choice() takes every position, in order: rows line up with outputs."""
    @staticmethod
    def choice(total, count, replace=False):
        return np.arange(count)


def _plans_and_feeds():
    calibration, evaluation = _digits()
    feeds = [{"image": calibration["image"][i:i + 1]} for i in range(0, 256, 4)]
    float_bytes, quantized = FLOAT.read_bytes(), INT8.read_bytes()
    plans = _plans(float_bytes, quantized, correctable_layers(float_bytes, quantized), 2)
    return plans, feeds, evaluation


def _float_ops(float_bytes: bytes) -> dict[int, tuple]:
    """Output tensor -> the op's bias tensor and the range its fused activation clips to."""
    schema = _schema()
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(float_bytes, 0))
    return {op.outputs[0]: (op.inputs[2], ACTIVATION_RANGE[getattr(
        op.builtinOptions, "fusedActivationFunction", 0)])
        for op in model.subgraphs[0].operators if len(op.inputs) > 2}


def test_rows_times_the_weight_give_each_layers_float_output():
    plans, feeds, _ = _plans_and_feeds()
    assert {(p.depthwise, p.fully_connected) for p in plans} == \
        {(True, False), (False, False), (False, True)}
    model, ops = _interpreter(FLOAT.read_bytes(), 2), _float_ops(FLOAT.read_bytes())
    _invoke(model, feeds[0])
    for plan in plans:
        x, weight = model.get_tensor(plan.input), model.get_tensor(plan.weight)
        shape = _geometry(plan)
        rows = hessian.patches(as_rows_input(x, plan), shape, 10**6, _InOrder())
        by_outputs = _by_outputs(weight, plan).reshape(shape.groups, -1, rows.shape[2])
        out = np.matmul(rows, by_outputs.transpose(0, 2, 1)).transpose(1, 0, 2)
        bias, clip = ops[plan.layer.reference]
        expected = model.get_tensor(plan.layer.reference).reshape(out.shape[0], -1)
        got = np.clip(out.reshape(out.shape[0], -1) + model.get_tensor(bias), *clip)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(_in_layout(_by_outputs(plan.integers, plan), plan),
                                      plan.integers)


def _output_error(plan, integers, weight, h) -> float:
    """tr(D H D^T) summed over groups: the layer's mean squared output error from its
    weights alone, D = W - W_q."""
    scale, zero = plan.grid
    difference = _by_outputs(weight - (integers - zero) * scale, plan)
    grouped = difference.reshape(h.shape[0], -1, h.shape[1])
    return float(np.einsum("goi,gij,goj->", grouped, h, grouped))


def test_gptq_lowers_every_layers_output_error_and_changes_only_weight_integers(tmp_path):
    plans, feeds, evaluation = _plans_and_feeds()
    made, report = variants(FLOAT.read_bytes(), {"int8": INT8.read_bytes()}, feeds,
                            [("nearest", False), ("gptq", False)])
    rounded_report = report["candidates"][("int8", "gptq", False)]
    assert rounded_report["layers_rounded"] == 4 and 0 < rounded_report["weights_changed"] < 0.5
    assert "layers_rounded" not in report["candidates"][("int8", "nearest", False)]
    assert made[("int8", "nearest", False)] == INT8.read_bytes()
    rounded = made[("int8", "gptq", False)]
    blanked = [bytearray(content) for content in (rounded, INT8.read_bytes())]
    for content in blanked:
        for view in buffer_views(content, [p.weight_buffer for p in plans], np.int8):
            view[:] = 0
    assert blanked[0] == blanked[1]  # nothing but the weights' integers moved

    model = _interpreter(FLOAT.read_bytes(), 2)
    after = _plans(FLOAT.read_bytes(), rounded, [p.layer for p in plans], 2)
    for plan, new in zip(plans, after):
        found = hessian.Hessian(_geometry(plan), 10**6, 0)
        for feed in feeds:
            _invoke(model, feed)
            found.add(as_rows_input(model.get_tensor(plan.input), plan))
        weight, h = model.get_tensor(plan.weight).astype(np.float64), found.mean()
        assert np.abs(new.integers.astype(int)).max() <= 127
        assert _output_error(plan, new.integers, weight, h) < \
            _output_error(plan, plan.integers, weight, h), plan.layer.name
    path = tmp_path / "rounded.tflite"
    path.write_bytes(rounded)
    assert _accuracy(path, evaluation["image"], evaluation["labels"]) >= \
        _accuracy(INT8, evaluation["image"], evaluation["labels"]) - 0.01


def test_rounding_then_correction_in_place(tmp_path):
    """correct_biases_fast rounds, then corrects the biases for the rounded weights: the
    same bytes as variants() makes for the pair."""
    _, feeds, _ = _plans_and_feeds()
    target = tmp_path / "int8.tflite"
    shutil.copy(INT8, target)
    report = correct_biases_fast(FLOAT, target, feeds, candidate=("gptq", True))
    made, _ = variants(FLOAT.read_bytes(), {"int8": INT8.read_bytes()}, feeds, [("gptq", True)])
    assert report["layers_rounded"] == report["layers_corrected"] == 4
    assert target.read_bytes() == made[("int8", "gptq", True)] != INT8.read_bytes()


@pytest.mark.parametrize("correction, rounding, expected", [
    ("checked", "gptq", ["minmax", "minmax+bias", "minmax+gptq", "minmax+gptq+bias"]),
    ("checked", "nearest", ["minmax", "minmax+bias"]),
    ("fast", "gptq", ["minmax+gptq+bias"]),
    ("fast", "nearest", ["minmax+bias"]),
    (None, "gptq", ["minmax+gptq"]),
    ("sequential", "nearest", ["minmax"]),  # corrected afterwards, layer by layer
])
def test_candidates_follow_the_settings(correction, rounding, expected):
    """Each of these per range estimator, the labels the stage's meta shows."""
    found = pairs(Int8Settings("auto", correction, rounding, 64))
    assert [label("minmax", *pair) for pair in found] == expected


def test_depthwise_and_fully_connected_layouts_round_trip():
    rng = np.random.default_rng(0)
    for integers, depthwise, fully_connected in (
            (rng.integers(-127, 128, (1, 3, 3, 8)), True, False),
            (rng.integers(-127, 128, (6, 3, 2, 4)), False, False),
            (rng.integers(-127, 128, (10, 7)), False, True)):
        plan = SimpleNamespace(integers=integers, depthwise=depthwise,
                               fully_connected=fully_connected)
        np.testing.assert_array_equal(_in_layout(_by_outputs(integers, plan), plan), integers)


def test_one_float_pass_for_several_files_makes_what_one_pass_per_file_makes(tmp_path):
    """The two range estimators' files of one float model: their layers share the float
    inputs, H and (same weight grid) GPTQ's integers, not their input grids."""
    from export.tflite import quantize_int8
    _, feeds, _ = _plans_and_feeds()
    files = {name: tmp_path / f"{name}.tflite" for name in ("average", "minmax")}
    quantize_int8(FLOAT, files, feeds)
    contents = {name: path.read_bytes() for name, path in files.items()}
    assert contents["average"] != contents["minmax"]
    wanted = [("nearest", True), ("gptq", True)]
    together, _ = variants(FLOAT.read_bytes(), contents, feeds, wanted)
    for name, content in contents.items():
        alone, _ = variants(FLOAT.read_bytes(), {name: content}, feeds, wanted)
        assert {key: together[key] for key in alone} == alone
