"""What the TFLite passes read of a full-int8 .tflite file and its float twin: the
flatbuffer schema, the correctable layers (an int8 CONV_2D, DEPTHWISE_CONV_2D or
FULLY_CONNECTED with an integer bias: int32, or int64 where its activations are int16,
as in the mixed files of the fidelity floor's recovery) matched to the float model's
tensors, writable views
of buffers inside the file's bytes, and an interpreter that keeps every intermediate
tensor (TFLite's built-in kernels: XNNPACK keeps them inside its own graph).

ai-edge-quantizer stores buffers after the flatbuffer proper (offset and size), older
writers inline; either way the bytes are patched in place."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# builtin operator codes (schema.fbs) of the ops whose input 2 is an integer bias
CORRECTABLE = {3: "CONV_2D", 4: "DEPTHWISE_CONV_2D", 9: "FULLY_CONNECTED"}
# fused activation (ActivationFunctionType) -> range its output is clipped to
ACTIVATION_RANGE = {0: (-np.inf, np.inf), 1: (0.0, np.inf), 2: (-1.0, 1.0), 3: (0.0, 6.0)}
INT32 = 2  # TensorType.INT32
# TensorType of a bias -> its dtype: int32 under int8 activations, int64 under int16 (int16x8)
BIAS_TYPES = {INT32: np.int32, 4: np.int64}
INT16 = 7  # TensorType.INT16: an int16x8 layer's input and output


def integer_bounds(kind: int) -> tuple[int, int]:
    """The lowest and highest integer of an int8 or int16 (TensorType `kind`) activation."""
    info = np.iinfo(np.int16 if kind == INT16 else np.int8)
    return int(info.min), int(info.max)


@dataclass(frozen=True)
class Layer:
    name: str
    output: int            # tensor index in the int8 model
    reference: int         # tensor index of the same tensor in the float model
    bias_buffer: int
    bias_scale: np.ndarray  # per output channel: input scale x weight scale
    output_scale: float
    output_zero_point: int
    low: float             # values outside (low, high) were clipped by one of the models
    high: float
    bias_dtype: type = np.int32   # np.int64 for an int16x8 layer


def schema():
    from ai_edge_litert import schema_py_generated
    return schema_py_generated


def builtin_code(model, op) -> int:
    code = model.operatorCodes[op.opcodeIndex]
    return max(code.builtinCode, code.deprecatedBuiltinCode)


def op_name(model, op) -> str:
    """An op's name: its builtin operator's (PRELU), or a custom op's own."""
    code = model.operatorCodes[op.opcodeIndex]
    if builtin_code(model, op) == schema().BuiltinOperator.CUSTOM and code.customCode:
        return code.customCode.decode()
    names = {v: k for k, v in vars(schema().BuiltinOperator).items() if not k.startswith("_")}
    return names.get(builtin_code(model, op), str(builtin_code(model, op)))


def float_ops(content: bytes) -> dict[str, int]:
    """The ops of a quantized file that compute in float32 (an input or output float32),
    by name and count; the QUANTIZE and DEQUANTIZE ops at their borders not counted."""
    graphs = schema()
    model = graphs.ModelT.InitFromObj(graphs.Model.GetRootAs(content, 0))
    borders = {graphs.BuiltinOperator.QUANTIZE, graphs.BuiltinOperator.DEQUANTIZE}
    found: dict[str, int] = {}
    for graph in model.subgraphs:
        for op in graph.operators:
            tensors = [graph.tensors[i] for i in [*op.inputs, *op.outputs] if i >= 0]
            if builtin_code(model, op) in borders or not any(
                    t.type == graphs.TensorType.FLOAT32 for t in tensors):
                continue
            name = op_name(model, op)
            found[name] = found.get(name, 0) + 1
    return found


def correctable_layers(float_model: bytes, quantized: bytes) -> list[Layer]:
    """Conv / depthwise conv / fully connected ops with an integer bias (BIAS_TYPES), in
    graph order, matched to the float model's tensor of the same name."""
    graphs = schema()
    qmodel = graphs.ModelT.InitFromObj(graphs.Model.GetRootAs(quantized, 0))
    fmodel = graphs.ModelT.InitFromObj(graphs.Model.GetRootAs(float_model, 0))
    float_index = {t.name: i for i, t in enumerate(fmodel.subgraphs[0].tensors)}
    graph = qmodel.subgraphs[0]
    layers = []
    for op in graph.operators:
        if builtin_code(qmodel, op) not in CORRECTABLE or len(op.inputs) < 3 or op.inputs[2] < 0:
            continue
        x, w, bias = (graph.tensors[i] for i in op.inputs[:3])
        out = graph.tensors[op.outputs[0]]
        if bias.type not in BIAS_TYPES or out.name not in float_index or out.quantization is None:
            continue
        scale, zero = float(out.quantization.scale[0]), int(out.quantization.zeroPoint[0])
        options = op.builtinOptions
        bounds = integer_bounds(out.type)
        act_low, act_high = ACTIVATION_RANGE.get(
            getattr(options, "fusedActivationFunction", 0), (-np.inf, np.inf))
        layers.append(Layer(
            name=out.name.decode(), output=op.outputs[0], reference=float_index[out.name],
            bias_buffer=bias.buffer,
            bias_scale=np.float64(x.quantization.scale[0]) * np.asarray(
                w.quantization.scale, np.float64),
            output_scale=scale, output_zero_point=zero,
            low=max(act_low, (bounds[0] - zero) * scale),
            high=min(act_high, (bounds[1] - zero) * scale), bias_dtype=BIAS_TYPES[bias.type]))
    return layers


def bias_views(model: bytearray, layers: list[Layer]) -> list[np.ndarray]:
    """Writable views of each layer's bias (int32 or int64) inside `model`'s bytes."""
    return [buffer_views(model, [layer.bias_buffer], layer.bias_dtype)[0] for layer in layers]


def buffer_views(model: bytearray, buffers: list[int], dtype) -> list[np.ndarray]:
    """Writable views, as `dtype`, of the given buffers inside `model`'s bytes."""
    root = schema().Model.GetRootAs(model, 0)
    views = []
    for index in buffers:
        buffer = root.Buffers(index)
        if buffer.Offset() > 1:  # stored after the flatbuffer
            start, size = buffer.Offset(), buffer.Size()
        else:  # inline vector
            start = buffer._tab.Vector(buffer._tab.Offset(4))
            size = buffer.DataLength()
        views.append(np.frombuffer(model, dtype, count=size // np.dtype(dtype).itemsize,
                                   offset=start))
    return views


def interpreter(content: bytes, threads: int):
    """The built-in kernels without delegates, as keeping every tensor requires (LiteRT
    drops the default delegates itself then). The float file it reads is the normalised
    one (tflite_normalise.py), whose custom ops that only XNNPACK ran are builtins."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    model = Interpreter(
        model_content=bytes(content), num_threads=threads,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        experimental_preserve_all_tensors=True)
    model.allocate_tensors()
    return model


def invoke(model, feed: dict) -> None:
    """Run one calibration sample; inputs in order, quantized where the model is int8."""
    from runtimes.litert_session import to_native
    for detail, value in zip(model.get_input_details(), feed.values()):
        model.set_tensor(detail["index"], to_native(detail, value))
    model.invoke()
