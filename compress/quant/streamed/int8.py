"""int8-dynamic tensor by tensor: the graph onnxruntime's quantize_dynamic makes of
MatMul and Gemm layers, node for node and with its own numerics (quant_utils), one weight
in memory at a time.

What quantize_dynamic does to them, and is done here the same way:
- a Gemm (alpha = beta = 1, no transA) becomes MatMul (+ Add of its bias), a transB
  weight transposed into `<B>_Transposed`;
- a MatMul with a constant float weight (or, with activation_matmuls, of two
  activations) becomes DynamicQuantizeLinear on the activation (shared by every
  consumer) -> MatMulInteger -> Cast -> Mul by the product of the scales;
- weights int8, symmetric, per output channel (or per tensor), 7-bit with reduce_range.
Unlike quantize_dynamic, a Gemm named in exclude_nodes stays a Gemm (quantize_dynamic
rewrites every Gemm first, so it no longer finds the excluded name); Conv, Gather and
the other ops it would quantize stay float.
"""
from __future__ import annotations

import numpy as np


def _quantized(build, name: str, array: np.ndarray, config, axis: int | None) -> tuple:
    """quantize_dynamic's `<w>_quantized`, `<w>_scale`, `<w>_zero_point` of one weight
    (onnxruntime's quantize_weight_per_channel / quantize_initializer numerics)."""
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization.quant_utils import quantize_data
    names = (f"{name}_quantized", f"{name}_scale", f"{name}_zero_point")
    if names[0] in build.added:
        return names
    if axis is None:
        zero, scale, values = quantize_data(array.flatten(), TensorProto.INT8, True,
                                            reduce_range=config.reduce_range)
        dims = []
    else:
        parts, zeros, scales = [], [], []
        shape = list(array.shape)
        shape[axis] = 1
        for index in range(array.shape[axis]):
            zero, scale, values = quantize_data(array.take(index, axis).flatten(),
                                                TensorProto.INT8, True,
                                                reduce_range=config.reduce_range)
            zeros.append(zero)
            scales.append(scale)
            parts.append(np.asarray(values).reshape(shape))
        values, zero, scale = np.concatenate(parts, axis), np.hstack(zeros), np.hstack(scales)
        dims = [array.shape[axis]]
    build.add(numpy_helper.from_array(np.asarray(values, np.int8).reshape(array.shape), names[0]))
    build.add(helper.make_tensor(names[1], TensorProto.FLOAT, dims,
                                 np.asarray(scale).reshape(-1).tolist()))
    build.add(helper.make_tensor(names[2], TensorProto.INT8, dims,
                                 np.asarray(zero).reshape(-1).tolist()))
    return names


def _plain_gemm(node) -> bool:
    from onnx import helper
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return (attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0
            and not attrs.get("transA", 0))


def _as_matmul(build, node, transposed: dict, pending: dict) -> list:
    """quantize_dynamic's MatMul (+ Add) for a Gemm; a transposed constant weight is kept
    in `pending` (name -> array) for the MatMul that quantizes it next."""
    from onnx import helper
    nodes, weight = [], node.input[1]
    if any(a.name == "transB" and helper.get_attribute_value(a) for a in node.attribute):
        if weight in build.initializers:
            if weight not in transposed:
                transposed[weight] = build.unique(f"{weight}_Transposed")
                pending[transposed[weight]] = np.ascontiguousarray(build.array(weight).T)
            weight = transposed[weight]
        else:
            nodes.append(helper.make_node("Transpose", [weight], [f"{weight}_Transposed"],
                                          name=f"{node.name}_Transpose" if node.name else ""))
            weight = f"{weight}_Transposed"
    bias = len(node.input) > 2 and node.input[2]
    product = node.output[0] + ("_MatMul" if bias else "")
    nodes.append(helper.make_node("MatMul", [node.input[0], weight], [product],
                                  name=f"{node.name}_MatMul" if node.name else ""))
    if bias:
        nodes.append(helper.make_node("Add", [product, node.input[2]], list(node.output),
                                      name=f"{node.name}_Add" if node.name else ""))
    return nodes


def _activation(build, name: str, made: set) -> tuple[list, tuple]:
    """DynamicQuantizeLinear of an activation (made once, whoever consumes it)."""
    from onnx import helper
    outputs = (f"{name}_quantized", f"{name}_scale", f"{name}_zero_point")
    if name in made:
        return [], outputs
    made.add(name)
    return [helper.make_node("DynamicQuantizeLinear", [name], list(outputs),
                             f"{name}_QuantizeLinear")], outputs


def _matmul_integer(build, node, config, pending: dict, made: set) -> list | None:
    """quantize_dynamic's MatMulInteger pattern for `node`, or None to keep it float."""
    from onnx import TensorProto, helper
    a, b = node.input[0], node.input[1]
    constant = b in pending or build.is_float_weight(b)
    if not constant and not (config.activation_matmuls and b not in build.initializers
                             and build.types.get(b) == TensorProto.FLOAT):
        return None
    nodes, (a_q, a_scale, a_zero) = _activation(build, a, made)
    if constant:
        array = pending.pop(b) if b in pending else build.array(b)
        b_q, b_scale, b_zero = _quantized(build, b, array, config,
                                          array.ndim - 1 if config.per_channel else None)
    else:
        more, (b_q, b_scale, b_zero) = _activation(build, b, made)
        nodes += more
    name = f"{node.name}_quant" if node.name else ""
    product = f"{node.output[0]}_output_quantized"
    scales = f"{name}_scales_mul" if name else f"{a_scale}_{b_scale}_mul"
    return nodes + [
        helper.make_node("MatMulInteger", [a_q, b_q, a_zero, b_zero], [product], name),
        helper.make_node("Cast", [product], [f"{product}_cast_output"], f"{product}_cast",
                         to=TensorProto.FLOAT),
        helper.make_node("Mul", [a_scale, b_scale], [f"{scales}:0"], scales),
        helper.make_node("Mul", [f"{product}_cast_output", f"{scales}:0"], [node.output[0]],
                         f"{name}_output_scale_mul" if name else "")]


def dynamic(build, config, excluded: set) -> dict:
    from onnx import numpy_helper
    transposed, pending, made, count = {}, {}, set(), 0
    for node in build.model.graph.node:
        replaced = [node]
        if node.op_type == "Gemm" and node.name not in excluded and _plain_gemm(node):
            replaced = _as_matmul(build, node, transposed, pending)
        for each in replaced:
            quantized = (_matmul_integer(build, each, config, pending, made)
                         if each.op_type == "MatMul" and each.name not in excluded else None)
            build.nodes += quantized or [each]
            count += quantized is not None
    for name, array in pending.items():  # a transposed weight left in float
        build.add(numpy_helper.from_array(array, name))
    return {"matmuls_quantized": count}
