"""GPTQ weight rounding (compress/quant/passes/gptq_rounding/onnx.py, hessian.py): the input patches it builds H
from, the rounding against H, and the whole pass on the small MobileNet-like CNN of
test_int8_techniques.py (trained on the digits)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from compress.quant import float_pass, hessian
from compress.quant.passes.gptq_rounding import gptq, onnx as rounding
from tests.compress.quant.test_int8_techniques import _outputs, _quantize, tiny  # noqa: F401


@pytest.mark.parametrize("groups, kernel, strides, pads, dilations", [
    (1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)), (2, (3, 2), (2, 1), (1, 0, 1, 1), (1, 2)),
    (4, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)), (1, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1))])
def test_patches_are_the_convolutions_own_input_rows(groups, kernel, strides, pads, dilations):
    """Every output of a real Conv (onnxruntime) is a patch row times its weights: the
    rows are the layer's input exactly, padding, stride, dilation and groups included."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 9, 7)).astype(np.float32)
    w = rng.standard_normal((8, 4 // groups, *kernel)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=groups, kernel_shape=kernel,
                            strides=strides, pads=[pads[0], pads[1], pads[2], pads[3]],
                            dilations=dilations)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, x.shape)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    y = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    shape = hessian.geometry(node)
    assert shape == hessian.Geometry(groups, kernel, strides, pads, dilations)
    rows = hessian.patches(x, shape, 10 ** 6, np.random.default_rng(0))  # every position
    assert rows.shape == (groups, y.size // w.shape[0], w[0].size)
    products = np.einsum("gmd,god->gom", rows, w.reshape(groups, 8 // groups, -1))
    np.testing.assert_allclose(np.sort(products.ravel()), np.sort(y.ravel()), atol=1e-4)


def test_gptq_output_error_is_below_nearest_rounding():
    """On correlated inputs, the layer's output error E[((W - W_q) x)^2] after GPTQ is well
    below nearest rounding's, on the same grid and inside the integer range."""
    rng = np.random.default_rng(1)
    mixing = rng.standard_normal((48, 48))
    x = rng.standard_normal((4000, 48)) @ mixing  # strongly correlated inputs
    w = rng.standard_normal((1, 16, 48))
    step = (np.abs(w).max(axis=2, keepdims=True) / 127)
    zero = np.zeros_like(step)
    h = (x.T @ x / len(x))[None]
    nearest = np.clip(np.round(w / step), -127, 127)
    found = gptq.gptq(w, h, step, zero, (-127, 127))
    assert found.min() >= -127 and found.max() <= 127 and np.all(found == np.round(found))

    def error(q):
        return float((((w - q * step)[0] @ x.T) ** 2).mean())
    assert error(found) < 0.6 * error(nearest)
    assert np.abs(found - nearest).max() <= 3  # a different rounding, not different weights


def test_rounding_changes_only_weight_integers_and_improves_fidelity(tiny, tmp_path):  # noqa: F811
    """The whole pass on the digits CNN: only int8 weights change (same scales, zero
    points, ops), each stays in the range nearest rounding used, and the model's output
    is closer to the float one on feeds the rounding never saw."""
    quantized = _quantize(tiny["pre"], tmp_path / "int8.onnx", tiny["calibration"])
    float_model, qdq = onnx.load(str(tiny["pre"])), onnx.load(str(quantized))
    seen = float_pass.layer_pass(float_model, qdq, tiny["calibration"], hessians=True)
    report = rounding.round_weights(seen, qdq, float_model)
    assert report.layers_rounded == 8 and 0 < report.weights_changed < 0.5
    rounded = tmp_path / "rounded.onnx"
    onnx.save(qdq, str(rounded))
    old, new = onnx.load(str(quantized)).graph, onnx.load(str(rounded)).graph
    assert [n.op_type for n in old.node] == [n.op_type for n in new.node]
    for a, b in zip(old.initializer, new.initializer):
        if a != b:
            before, after = numpy_helper.to_array(a), numpy_helper.to_array(b)
            assert before.dtype == after.dtype == np.int8 and before.ndim in (2, 4)
            assert before.min() <= after.min() and after.max() <= before.max()
    reference = _outputs(float_model, tiny["evaluation"])

    def sqnr(path):
        out = _outputs(onnx.load(str(path)), tiny["evaluation"])
        return 10 * np.log10((reference ** 2).sum() / ((out - reference) ** 2).sum())
    assert sqnr(rounded) > sqnr(quantized)


def test_layers_it_cannot_round_are_left_alone():
    conv3d = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3, 3])
    same = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], auto_pad="SAME_UPPER")
    gemm_t = helper.make_node("Gemm", ["x", "w"], ["y"], transA=1)
    assert [hessian.geometry(n) for n in (conv3d, same, gemm_t)] == [None, None, None]
    assert hessian.geometry(helper.make_node("Gemm", ["x", "w"], ["y"])).groups == 1


def test_hessian_takes_its_row_budget_from_at_most_hessian_feeds_feeds():
    """H's cost is per feed and layer: of 128 feeds it takes every other one, each with
    the share of the layer's row budget that makes the budget over those it takes."""
    shape = hessian.Geometry(1, (1, 1))
    x = np.random.default_rng(2).standard_normal((1, 300, 8, 8)).astype(np.float32)
    moments = hessian.Hessian.budgeted(shape, 300, 128, seed=0)
    for _ in range(128):
        moments.add(x)
    budget = min(hessian.ROWS_PER_INPUT * 300, hessian.MAX_ROWS)
    assert moments.every == 2 and moments.positions == -(-budget // 64)
    h = moments.mean()
    assert moments.rows == 64 * moments.positions and h.shape == (1, 300, 300)
    np.testing.assert_allclose(h[0], h[0].T, rtol=1e-5, atol=1e-6)  # float32 sums


def test_singular_or_broken_h_never_fails_the_stage():
    """Duplicated and always-zero inputs make H singular: the damping still factors it
    and the rounding is valid; an H with NaN (a feed the float model overflowed on) is
    refused, so the layer keeps nearest rounding instead of the stage failing."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal((40, 100))
    x = np.concatenate([base, base, np.zeros((40, 100))], axis=1)  # 300 inputs, rank 40
    h = (x.T @ x / len(x))[None]
    w = rng.standard_normal((1, 8, 300))
    step, zero = np.abs(w).max(axis=2, keepdims=True) / 127, np.zeros((1, 8, 1))
    found = gptq.gptq(w, h, step, zero, (-127, 127))
    assert found is not None and np.abs(found - np.round(w / step)).max() <= 3
    h[0, 5, 5] = np.nan
    assert gptq.gptq(w, h, step, zero, (-127, 127)) is None
