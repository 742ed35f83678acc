"""int8-static (QDQ) tensor by tensor: the QDQ graph onnxruntime's quantize_static makes
of MatMul, Gemm and ReLU layers, after quant_pre_process has fused MatMul + Add into
Gemm, with onnxruntime's own numerics (compute_data_quant_params, quantize_onnx_initializer,
compute_scale_zp) and one weight in memory at a time.

As quantize_static does: Q -> DQ on every activation a quantized node reads or writes
(one pair per tensor, shared by its consumers); weights behind a DequantizeLinear, per
channel (symmetric) or per tensor; a Gemm's constant bias as int32 (scale = input scale x
weight scale); a ReLU after a quantized node removed (the Q of its output clips the same)
unless activations are symmetric. The other ops it quantizes (Conv, Add, Reshape, ...)
stay float here, with no Q/DQ around them; a bias too large for int32 at those scales is
clipped (quantize_static would raise the weight's scale instead).
"""
from __future__ import annotations

import numpy as np

from compress.quant.qdq_nodes import attr


def _consumers(nodes) -> dict:
    found = {}
    for node in nodes:
        for name in node.input:
            found.setdefault(name, []).append(node)
    return found


def _fused(build, nodes, excluded: set) -> list:
    """quant_pre_process's MatMul + Add -> Gemm (MatMulAddFusion) where the MatMul reads a
    2-D activation and a constant 2-D weight, and the Add a constant bias of N."""
    from onnx import helper
    consumers, shapes = _consumers(nodes), _shapes(build.model.graph)
    outputs = {o.name for o in build.model.graph.output}
    fused, dropped = {}, set()
    for node in nodes:
        users = consumers.get(node.output[0], []) if node.op_type == "MatMul" else []
        if len(users) != 1 or users[0].op_type != "Add" or node.name in excluded \
                or node.output[0] in outputs or len(shapes.get(node.input[0], ())) != 2:
            continue
        add, weight = users[0], build.initializers.get(node.input[1])
        bias = build.initializers.get(next((n for n in add.input if n != node.output[0]), ""))
        if weight is None or bias is None or len(weight.dims) != 2 \
                or list(bias.dims) != [weight.dims[1]]:
            continue
        fused[id(node)] = helper.make_node(
            "Gemm", [node.input[0], node.input[1], bias.name], list(add.output),
            name=f"{node.name}/MatMulAddFusion", transA=0, alpha=1.0, transB=0, beta=1.0)
        dropped.add(id(add))
    return [fused.get(id(n), n) for n in nodes if id(n) not in dropped]


def _with_nodes(model, nodes: list):
    """A copy of `model` (no weights' data) with copies of `nodes` as its graph."""
    import onnx
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.node[:]
    copy.graph.node.extend(nodes)
    return copy


def _shapes(graph) -> dict:
    return {v.name: tuple(d.dim_value if d.HasField("dim_value") else None
                          for d in v.type.tensor_type.shape.dim)
            for v in (*graph.input, *graph.value_info, *graph.output)
            if v.type.tensor_type.HasField("shape")}


def _float(build, name: str) -> bool:
    """A float activation (or one whose type shape inference could not tell)."""
    from onnx import TensorProto
    return name not in build.initializers and build.types.get(name, 1) == TensorProto.FLOAT


def _relu(node, activations: dict, producers: dict, consumers: dict, removable) -> bool:
    """QDQRemovableActivation: True when the ReLU is removed (its producer writes the
    ReLU's output, quantized with the ReLU's range); else its input takes the ReLU's
    range (adjust_tensor_ranges) and both are quantized."""
    upstream, output = node.input[0], node.output[0]
    activations[output] = None
    if removable(upstream):
        producer = producers[upstream]
        producer.output[:] = [output if o == upstream else o for o in producer.output]
        del activations[upstream]
        return True
    if len(consumers[upstream]) == 1:
        activations[upstream] = output
    return False


def _plan(build, nodes, config, excluded: set) -> tuple[list, dict, dict, dict]:
    """(nodes, activations to quantize {name: the tensor whose range it takes, or None},
    weights {name: per-channel axis or None}, biases {bias: (node, input, weight, beta)}),
    in onnxruntime's order."""
    activations, weights, biases, kept = {}, {}, {}, []
    consumers, producers = _consumers(nodes), {o: n for n in nodes for o in n.output}
    ends = {o.name for o in build.model.graph.output} | {i.name for i in build.model.graph.input}

    def removable(upstream):
        return (not config.symmetric_activations and upstream in producers
                and len(consumers[upstream]) == 1 and upstream not in ends)
    for node in nodes:
        if node.name in excluded:
            pass
        elif node.op_type == "Gemm" and build.is_float_weight(node.input[1]) \
                and _float(build, node.input[0]):
            activations.update(dict.fromkeys((node.input[0], node.output[0])))
            axis = 0 if attr(node, "transB", 0) else 1
            weights.setdefault(node.input[1], axis if config.per_channel else None)
            if len(node.input) > 2 and build.is_float_weight(node.input[2]) and config.quantize_bias:
                biases[node.input[2]] = (node, node.input[0], node.input[1], attr(node, "beta", 1.0))
        elif node.op_type == "MatMul" and all(build.is_float_weight(n) or _float(build, n)
                                              for n in node.input):
            for name in node.input:
                if build.is_float_weight(name):
                    weights.setdefault(name, 1 if config.per_channel else None)
                else:
                    activations[name] = None
            activations[node.output[0]] = None
        elif node.op_type == "Relu" and node.input[0] in activations:
            if _relu(node, activations, producers, consumers, removable):
                continue
        kept.append(node)
    return kept, activations, weights, biases


def _activation_params(data, config, qtype: int) -> tuple[np.ndarray, np.ndarray]:
    """QDQQuantizer.calc_quant_params for a tensor's calibrated range."""
    from onnxruntime.quantization.quant_utils import compute_scale_zp, get_qmin_qmax_for_qType
    symmetric = config.symmetric_activations
    qmin, qmax = get_qmin_qmax_for_qType(qtype, reduce_range=False, symmetric=symmetric)
    rmin, rmax = data.range_value
    zero, scale = compute_scale_zp(rmin, rmax, qmin, qmax, symmetric, None)
    return zero.squeeze(), scale.squeeze()


def _weight_params(array: np.ndarray, config, qtype: int, axis) -> tuple:
    """QDQQuantizer._calc_initializer_quant_params: per channel always symmetric."""
    from onnxruntime.quantization.quant_utils import compute_data_quant_params
    if axis is None:
        symmetric = (config.symmetric_weights if config.symmetric_weights is not None
                     else qtype == _types()["int8"])
        return compute_data_quant_params(array.flatten(), qtype, symmetric,
                                         reduce_range=config.reduce_range)
    pairs = [compute_data_quant_params(array.take(i, axis).ravel(), qtype, True,
                                       reduce_range=config.reduce_range)
             for i in range(array.shape[axis])]
    return np.asarray([p[0] for p in pairs]), np.asarray([p[1] for p in pairs])


def _types() -> dict:
    from onnx import TensorProto
    return {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def _scale_zero(build, name: str, zero: np.ndarray, scale: np.ndarray, qtype: int) -> tuple:
    from onnx import TensorProto, helper
    build.add(helper.make_tensor(f"{name}_zero_point", qtype, zero.shape, zero.ravel().tolist()))
    build.add(helper.make_tensor(f"{name}_scale", TensorProto.FLOAT, scale.shape,
                                 scale.reshape(-1).tolist()))
    return f"{name}_scale", f"{name}_zero_point"


def _dq(name: str, inputs: list, output: str, axis=None):
    from onnx import helper
    return helper.make_node("DequantizeLinear", inputs, [output], f"{name}_DequantizeLinear",
                            **({"axis": axis} if axis is not None else {}))


def _weight_nodes(build, weights: dict, config) -> tuple[list, dict]:
    """A DequantizeLinear per weight (quantized with quantize_onnx_initializer), and each
    weight's scale array (for its biases)."""
    from onnx import numpy_helper
    from onnxruntime.quantization.quant_utils import quantize_onnx_initializer
    qtype, nodes, scales = _types()[config.weights], [], {}
    for name, axis in weights.items():
        array = build.array(name)
        zero, scale = _weight_params(array, config, qtype, axis)
        quantized = build.add(quantize_onnx_initializer(numpy_helper.from_array(array, name),
                                                        qtype, zero, scale, axis))
        del array
        names = _scale_zero(build, name, np.asarray(zero), np.asarray(scale), qtype)
        nodes.append(_dq(name, [quantized, *names], f"{name}_DequantizeLinear_Output", axis))
        scales[name] = np.asarray(scale, np.float32)
    return nodes, scales


def _bias_nodes(build, biases: dict, input_scales: dict, weight_scales: dict) -> list:
    """quantize_bias_static_impl: int32 biases at input scale x weight scale x beta."""
    from onnx import TensorProto, helper, numpy_helper
    nodes, limit = [], np.float64(np.iinfo(np.int32).max)
    for bias, (node, source, weight, beta) in biases.items():
        data = build.array(bias)
        scale = input_scales[source] * weight_scales[weight] * beta
        values = np.asarray(data, np.float64) / np.asarray(scale, np.float64)
        values = np.clip(values.round(), -limit - 1, limit).astype(np.int32)
        name = f"{bias}_quantized"
        build.add(numpy_helper.from_array(values.reshape(tuple(data.shape)), name))
        build.add(numpy_helper.from_array(np.asarray(scale, data.dtype).reshape(-1), f"{name}_scale"))
        build.add(numpy_helper.from_array(np.zeros(scale.size, np.int32), f"{name}_zero_point")
                  if scale.size > 1 else helper.make_tensor(f"{name}_zero_point",
                                                            TensorProto.INT32, [], [0]))
        nodes.append(helper.make_node("DequantizeLinear", [name, f"{name}_scale",
                                                           f"{name}_zero_point"], [bias],
                                      f"{bias}_DequantizeLinear",
                                      **({"axis": 0} if scale.size > 1 else {})))
        for attribute in node.attribute:  # set_default_beta: the DQ carries beta now
            if attribute.name == "beta":
                attribute.f = 1.0
    return nodes


def _qdq(name: str, source: str, params: tuple, output: str):
    from onnx import helper
    return [helper.make_node("QuantizeLinear", [source, *params], [f"{name}_QuantizeLinear_Output"],
                             f"{name}_QuantizeLinear"),
            _dq(name, [f"{name}_QuantizeLinear_Output", *params], output)]


def _wired(build, nodes: list, activations: dict, weights: dict, params: dict) -> list:
    """The nodes reading the dequantized tensors, each quantized activation's Q -> DQ
    right after its producer (graph inputs' first, graph outputs' renamed)."""
    outputs = {o.name for o in build.model.graph.output}
    swap = {name: f"{name}_DequantizeLinear_Output" for name in [*activations, *weights]
            if name not in outputs}
    wired = [q for i in build.model.graph.input if i.name in activations
             for q in _qdq(i.name, i.name, params[i.name], swap[i.name])]
    for node in nodes:
        node.input[:] = [swap.get(n, n) for n in node.input]
        pairs = []
        for index, name in enumerate(node.output):
            if name in activations:
                source = f"{name}_QuantizeLinear_Input" if name in outputs else name
                node.output[index] = source
                pairs += _qdq(name, source, params[name], swap.get(name, name))
        wired += [node, *pairs]
    return wired


def static(build, config, ctx, excluded: set, folder, ranges: dict) -> dict:
    """`ranges`: the tensors' calibrated ranges, shared by the calls of an accuracy-aware
    search (which only ever leaves tensors out): the first call calibrates."""
    fused = _fused(build, list(build.model.graph.node), excluded)
    # calibrated on the float graph quantize_static would calibrate (the fused one): a
    # Gemm rounds its bias in differently from MatMul then Add
    float_model = _with_nodes(build.model, fused)
    nodes, activations, weights, biases = _plan(build, fused, config, excluded)
    feeds = ctx.require_dataset("calibration", "int8-static quantization").take(config.samples)
    wanted = sorted({source or name for name, source in activations.items()} - set(ranges))
    if wanted:
        from compress.quant.streamed.calibration import FloatGraph, calibrate
        with ctx.progress.task(f"calibrating ({config.calibration}, {len(feeds)} samples)",
                               len(feeds)) as advance:
            ranges.update(calibrate(FloatGraph(float_model, build.header.spans), wanted, feeds,
                                    config, folder, advance).items())
    qtype, params, input_scales = _types()[config.activations], {}, {}
    for name, source in activations.items():
        zero, scale = _activation_params(ranges[source or name], config, qtype)
        params[name] = _scale_zero(build, name, np.asarray(zero), np.asarray(scale), qtype)
        input_scales[name] = np.asarray(scale, np.float32)
    dequantized, weight_scales = _weight_nodes(build, weights, config)
    dequantized += _bias_nodes(build, biases, input_scales, weight_scales)
    build.nodes = dequantized + _wired(build, nodes, activations, weights, params)
    return {"calibration": config.calibration, "calibration_samples": len(feeds)}
