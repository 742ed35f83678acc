"""int4-weight-only (round to nearest) tensor by tensor: onnxruntime's own MatMulNBits
quantizer (DefaultWeightOnlyQuantizer) called on one node at a time, in a graph holding
just that node's weight, so its numerics, names and nodes are those of
compress.quant.int4's whole-model path. Gemm layers are rewritten as MatMul (+ Add)
first, as there (gemm_to_matmul), the weight transposed as it is read."""
from __future__ import annotations

import numpy as np

from compress.quant.int4 import QUANTIZABLE


def _gemm_as_matmul(build, node) -> list | None:
    """compress.quant.int4.gemm_to_matmul for one node: MatMul(A, W') + C, or None."""
    from onnx import helper, numpy_helper
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if (node.input[1] not in build.initializers or attrs.get("transA", 0)
            or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0):
        return None
    weight = build.array(node.input[1])
    if attrs.get("transB", 0):
        weight = weight.T
    name = f"{node.input[1]}_matmul"
    build.pending[name] = numpy_helper.from_array(np.ascontiguousarray(weight), name)
    has_bias = len(node.input) > 2 and node.input[2]
    product = f"{node.output[0]}_matmul" if has_bias else node.output[0]
    nodes = [helper.make_node("MatMul", [node.input[0], name], [product],
                              name=f"{node.name}_matmul")]
    if has_bias:
        nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]],
                                      name=f"{node.name}_bias"))
    return nodes


def _weight_of(build, node):
    """The constant a MatMul (input 1) or Gather (input 0) reads, as a TensorProto with
    its data, or None."""
    from onnx import numpy_helper
    name = node.input[0 if node.op_type == "Gather" else 1]
    if name in build.pending:
        return build.pending.pop(name)
    if name not in build.initializers:
        return None
    return numpy_helper.from_array(build.array(name), name)


def _one_node(build, quantizer, node) -> list:
    """onnxruntime's quantizer on `node` in a graph of its weight alone; the weights it
    makes go to the scratch file."""
    import onnx
    weight = _weight_of(build, node)
    if weight is None:
        return [node]
    graph = onnx.GraphProto()
    graph.initializer.append(weight)
    # the activation's rank decides whether an N-D weight's output needs a Reshape
    graph.value_info.extend(v for v in build.model.graph.value_info if v.name == node.input[0])
    graph.input.extend(v for v in build.model.graph.input if v.name == node.input[0])
    nodes = quantizer.quantize(node, [graph])
    if nodes == [node] and weight.name not in build.initializers:
        build.add(weight)  # a rewritten Gemm's weight the quantizer left in float
    for tensor in list(graph.initializer)[1:]:
        build.add(tensor)
    return nodes


def _set_opset(model, domain: str, version: int) -> None:
    """onnxruntime's ONNXModel.set_opset_import."""
    for opset in model.opset_import:
        if opset.domain == domain:
            opset.version = version
            return
    model.opset_import.add(domain=domain, version=version)


def int4(build, config, excluded: set) -> dict:
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig, DefaultWeightOnlyQuantizer)
    op_types = ("MatMul", "Gather") if config.embeddings_quantized else ("MatMul",)
    quantizer = DefaultWeightOnlyQuantizer(DefaultWeightOnlyQuantConfig(
        block_size=config.block_size, is_symmetric=config.symmetric,
        accuracy_level=config.accuracy_level, op_types_to_quantize=op_types,
        quant_axes=(("MatMul", 0), ("Gather", 1))))
    build.pending, rewritten = {}, 0
    nodes = list(build.model.graph.node)
    if not any(n.op_type in QUANTIZABLE and len(n.input) > 1 and n.input[1] in build.initializers
               for n in nodes):
        from compress.quant.int4 import no_weights_error
        raise no_weights_error(nodes)
    for node in nodes:
        replaced = _gemm_as_matmul(build, node) if node.op_type == "Gemm" else None
        rewritten += replaced is not None
        for each in replaced or [node]:
            # a rewritten Gemm keeps its exclusion under the MatMul's name
            skip = each.name in excluded or each.name.removesuffix("_matmul") in excluded
            build.nodes += (_one_node(build, quantizer, each)
                            if each.op_type in op_types and not skip else [each])
    for tensor in build.pending.values():  # an excluded Gemm's transposed weight
        build.add(tensor)
    _set_opset(build.model, "com.microsoft", 1)
    if "Gather" in op_types:  # as MatMulNBitsQuantizer.process: int4 tensors need 21 / IR 10
        for opset in build.model.opset_import:
            if opset.domain in ("", "ai.onnx") and opset.version < 21:
                opset.version = 21
        build.model.ir_version = max(build.model.ir_version, 10)
    return {"algorithm": config.algorithm, "block_size": config.block_size,
            "embeddings_quantized": config.embeddings_quantized,
            "symmetric": config.symmetric, "accuracy_level": config.accuracy_level,
            "gemm_rewritten_as_matmul": rewritten}
