"""INT4 weight-only quantization of ONNX models with onnxruntime's MatMulNBits quantizer.

Weights of MatMul nodes (and of Gather embeddings, as GatherBlockQuantized) become 4-bit
blocks with one scale (and zero point, if asymmetric) per block; activations stay float.
Gemm nodes with a constant weight, which the quantizer skips, are rewritten first as
MatMul + Add so 2-D Linear layers are quantized too.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from compress.errors import ModelError

QUANTIZABLE = ("MatMul", "Gemm")


def _constant_weights(graph) -> set[str]:
    return {init.name for init in graph.initializer}


def gemm_to_matmul(model) -> int:
    """Rewrite Gemm(A, W, C) with a constant 2-D W (alpha = beta = 1, no transA) as
    MatMul(A, W') + C. Returns how many were rewritten."""
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    rewritten, nodes = 0, []
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if (node.op_type != "Gemm" or node.input[1] not in initializers
                or attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0
                or attrs.get("beta", 1.0) != 1.0):
            nodes.append(node)
            continue
        weight = numpy_helper.to_array(initializers[node.input[1]])
        if attrs.get("transB", 0):
            weight = weight.T
        name = f"{node.input[1]}_matmul"
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(weight), name))
        has_bias = len(node.input) > 2 and node.input[2]
        product = f"{node.output[0]}_matmul" if has_bias else node.output[0]
        nodes.append(helper.make_node("MatMul", [node.input[0], name], [product],
                                      name=f"{node.name}_matmul"))
        if has_bias:
            nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]],
                                          name=f"{node.name}_bias"))
        rewritten += 1
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input}
    keep = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    return rewritten


def no_weights_error(nodes) -> ModelError:
    ops = sorted({n.op_type for n in nodes})
    return ModelError("int4-weight-only quantizes the weights of MatMul/Gemm layers (and "
                      f"embeddings), and this model has none with constant weights (its "
                      f"ops: {', '.join(ops[:12])}). For convolutional models use "
                      "`scheme: int8-static`")


def quantize_int4(source: Path, target: Path, config, exclude: tuple = ()) -> dict:
    import onnx
    model = onnx.load(str(source))
    weights = _constant_weights(model.graph)
    with_weights = [n for n in model.graph.node
                    if n.op_type in QUANTIZABLE and len(n.input) > 1 and n.input[1] in weights]
    if not with_weights:
        raise no_weights_error(model.graph.node)
    rewritten = gemm_to_matmul(model)
    op_types = ("MatMul", "Gather") if config.embeddings_quantized else ("MatMul",)
    # a Gemm kept in float is named so in the rewritten graph too (its MatMul: <name>_matmul)
    exclude = tuple(exclude) + tuple(f"{name}_matmul" for name in
                                     (*config.exclude_nodes, *exclude))
    _nbits(model, target, config, op_types, config.algorithm, exclude)
    return {"algorithm": config.algorithm, "block_size": config.block_size,
            "embeddings_quantized": config.embeddings_quantized,
            "symmetric": config.symmetric, "accuracy_level": config.accuracy_level,
            "gemm_rewritten_as_matmul": rewritten}


def _bits(data_type: int) -> int:
    """Bits per element as stored (4-bit types are packed two to a byte)."""
    from onnx import TensorProto, helper
    if data_type in (TensorProto.UINT4, TensorProto.INT4):
        return 4
    return np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize * 8


def weight_precision(float_path: Path | None, quantized_path: Path,
                     parameters: int | None = None) -> dict:
    """Effective bits per weight (every byte of every initializer of the quantized model,
    scales and zero points included, over the float model's parameter count) and the
    tensors that stayed in float. `parameters` replaces the float model's count when
    there is no float ONNX model (a torch model quantized by neural-compressor)."""
    from onnx import TensorProto

    def initializers(path):
        # dims and types only: the weights' bytes stay in the file
        from compress.model.onnx_file import header_model
        return header_model(path).graph.initializer

    if parameters is None:
        parameters = sum(int(np.prod(i.dims)) for i in initializers(float_path)
                         if i.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16))
    after = initializers(quantized_path)
    stored_bits = sum(int(np.prod(i.dims)) * _bits(i.data_type) for i in after)
    floats = sorted(((i.name, int(np.prod(i.dims))) for i in after
                     if i.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16)),
                    key=lambda item: -item[1])
    # scales (and HQQ zero points) are float too, but they belong to the quantized weights
    kept = [(name, count) for name, count in floats
            if not name.endswith(("_scales", "_zero_points"))]
    kept_count = sum(count for _, count in kept)
    return {
        "parameters": parameters,
        "effective_bits_per_weight": stored_bits / max(parameters, 1),
        "float_parameters": kept_count,
        "float_share": kept_count / max(parameters, 1),
        "largest_float_tensors": [{"name": n, "parameters": c} for n, c in kept[:8]],
    }


def quantize_embeddings(path: Path, config) -> int:
    """Quantize the Gather embedding tables of `path` in place (4-bit blocks, as
    GatherBlockQuantized); the MatMuls are left as they are. Returns how many."""
    import onnx
    model = onnx.load(str(path))
    before = sum(n.op_type == "Gather" for n in model.graph.node)
    after = _nbits(model, path, config, ("Gather",), "rtn")
    return before - sum(n.op_type == "Gather" for n in after.graph.node)


def _nbits(model, target: Path, config, op_types: tuple, algorithm: str, exclude: tuple = ()):
    """onnxruntime's MatMulNBits quantizer on `op_types` of `model`, saved to `target`;
    returns the quantized ModelProto."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (DefaultWeightOnlyQuantConfig,
                                                                 HQQWeightOnlyQuantConfig,
                                                                 MatMulNBitsQuantizer)
    if algorithm == "hqq":
        algo = HQQWeightOnlyQuantConfig(block_size=config.block_size, bits=4,
                                        op_types_to_quantize=op_types)
    else:
        algo = DefaultWeightOnlyQuantConfig(
            block_size=config.block_size, is_symmetric=config.symmetric,
            accuracy_level=config.accuracy_level, op_types_to_quantize=op_types,
            quant_axes=(("MatMul", 0), ("Gather", 1)))
    quantizer = MatMulNBitsQuantizer(
        model, block_size=config.block_size, is_symmetric=config.symmetric,
        accuracy_level=config.accuracy_level,
        nodes_to_exclude=list(config.exclude_nodes) + list(exclude), algo_config=algo)
    with warnings.catch_warnings():  # HQQ hands read-only arrays to torch; harmless here
        warnings.simplefilter("ignore", UserWarning)
        try:
            quantizer.process()
        except (NotImplementedError, ValueError, AssertionError) as exc:
            raise ModelError(f"onnxruntime's MatMulNBits quantizer ({algorithm}) failed: "
                             f"{type(exc).__name__}: {exc}") from None
    quantizer.model.save_model_to_file(str(target), use_external_data_format=False)
    return quantizer.model.model
