"""A .tflite file as apps ship it, rewritten into the form ai-edge-quantizer takes, in a
copy (the user's file is never changed). Each of these made files of a popular on-device
vision framework fail in the quantizer, or quantize wrongly (issue 36):

- no SignatureDef (TF 1.x converters, MediaPipe): the quantizer calibrates through a
  signature runner; one is added, named serving_default, from subgraph 0's inputs and
  outputs;
- op codes only in `deprecated_builtin_code` (converters before TF 2.4; codes < 127):
  the quantizer reads `builtin_code` alone, where 0 is ADD, and took every op for an
  ADD; the code is moved into `builtin_code`;
- float16 weights, each behind a DEQUANTIZE op (TF's float16 quantization): the
  quantizer crashes on them; they become float32 constants again, the DEQUANTIZE ops
  dropped (their outputs, which the consumers read, hold the weights);
- MediaPipe's `Convolution2DTransposeBias` custom op: LiteRT runs it only inside
  XNNPACK, while the quantizer calibrates without delegates (to keep every intermediate
  tensor); it becomes the builtin TRANSPOSE_CONV with its bias, the same arithmetic
  (XNNPACK runs both with one kernel).

    normalise(source, target) -> Normalised(path, record)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from compress.errors import ModelError
from compress.quant.tflite.graph import schema

TRANSPOSE_CONV_BIAS = "Convolution2DTransposeBias"
PLACEHOLDER_FOR_GREATER_OP_CODES = 127  # deprecated_builtin_code of the codes past it
TFLITE_PADDING = {1: "SAME", 2: "VALID"}  # TfLitePadding, MediaPipe's custom options
FLATBUFFER_LIMIT = 2**31 - 1  # a rewritten file is one flatbuffer


@dataclass(frozen=True)
class Record:
    """What was changed in the copy; empty where the file needed nothing."""
    signature_added: bool = False       # serving_default, from subgraph 0's inputs/outputs
    op_codes_moved: int = 0             # operator codes read from deprecated_builtin_code
    fp16_weights_dequantized: int = 0   # float16 constants made float32, DEQUANTIZE dropped
    custom_ops_replaced: dict = field(default_factory=dict)  # "custom -> BUILTIN": count
    custom_ops_kept: tuple = ()         # custom ops no builtin replaces (LiteRT delegates run them)

    def changed(self) -> bool:
        return bool(self.signature_added or self.op_codes_moved
                    or self.fp16_weights_dequantized or self.custom_ops_replaced)

    def as_meta(self) -> dict:
        """The fields that say something, for the stage's meta."""
        return {name: list(value) if isinstance(value, tuple) else value
                for name, value in vars(self).items() if value}


@dataclass(frozen=True)
class Normalised:
    path: Path      # the copy, or the source itself where nothing needed changing
    record: Record


def normalise(source: Path, target: Path) -> Normalised:
    """`source` in the form ai-edge-quantizer takes, written to `target` where anything
    had to change (else `source` as it is), with what was changed."""
    from ai_edge_litert.tools import flatbuffer_utils
    content = bytearray(Path(source).read_bytes())
    model = flatbuffer_utils.read_model_from_bytearray(content)
    for buffer in model.buffers:  # packed as numpy vectors (byte by byte otherwise)
        if buffer.data is not None and not isinstance(buffer.data, np.ndarray):
            buffer.data = np.frombuffer(bytes(buffer.data), np.uint8)
    moved = _move_op_codes(model)
    replaced, kept = _builtin_transpose_conv(model)
    record = Record(op_codes_moved=moved, custom_ops_replaced=replaced,
                    fp16_weights_dequantized=_dequantize_fp16(model),
                    signature_added=_add_signature(model), custom_ops_kept=kept)
    if not record.changed():
        return Normalised(Path(source), record)
    if len(content) > FLATBUFFER_LIMIT:
        raise ModelError(f"{Path(source).name} needs rewriting before ai-edge-quantizer "
                         f"takes it ({', '.join(record.as_meta())}), which a file past 2 GB "
                         "cannot be")
    target.write_bytes(flatbuffer_utils.convert_object_to_bytearray(model))
    return Normalised(target, record)


def _move_op_codes(model) -> int:
    """Operator codes whose op was only in deprecated_builtin_code, moved into
    builtin_code (the old field keeps what current converters write there)."""
    moved = 0
    for code in model.operatorCodes:
        real = max(code.builtinCode, code.deprecatedBuiltinCode)
        moved += code.builtinCode != real
        code.builtinCode = real
        code.deprecatedBuiltinCode = min(real, PLACEHOLDER_FOR_GREATER_OP_CODES)
    return moved


def _custom_name(model, op) -> str | None:
    code = model.operatorCodes[op.opcodeIndex]
    if code.builtinCode != schema().BuiltinOperator.CUSTOM or code.customCode is None:
        return None
    name = code.customCode
    return name.decode() if isinstance(name, bytes) else str(name)


def _builtin_transpose_conv(model) -> tuple[dict, tuple]:
    """Every Convolution2DTransposeBias op whose options and output shape are known made
    a TRANSPOSE_CONV; ({"custom -> BUILTIN": count}, the custom ops left, by name)."""
    replaced, kept = 0, set()
    for graph in model.subgraphs:
        for op in graph.operators:
            name = _custom_name(model, op)
            if name is None:
                continue
            if name == TRANSPOSE_CONV_BIAS and _as_transpose_conv(model, graph, op):
                replaced += 1
            else:
                kept.add(name)
    if not replaced:
        return {}, tuple(sorted(kept))
    _drop_unused_op_codes(model)
    return {f"{TRANSPOSE_CONV_BIAS} -> TRANSPOSE_CONV": replaced}, tuple(sorted(kept))


def _drop_unused_op_codes(model) -> None:
    """Operator codes no op uses any more (a replaced custom op's) removed, so that no
    reader of the copy takes the file for one that needs that op."""
    used = sorted({op.opcodeIndex for graph in model.subgraphs for op in graph.operators})
    new = {old: position for position, old in enumerate(used)}
    model.operatorCodes = [model.operatorCodes[i] for i in used]
    for graph in model.subgraphs:
        for op in graph.operators:
            op.opcodeIndex = new[op.opcodeIndex]


def _as_transpose_conv(model, graph, op) -> bool:
    """Rewrite one Convolution2DTransposeBias op (inputs: data, weights OHWI, bias;
    options: TfLiteTransposeConvParams' padding and strides) as TRANSPOSE_CONV (inputs:
    the output's shape, weights, data, bias). False where it cannot be said exactly."""
    s = schema()
    raw = bytes(np.asarray(op.customOptions if op.customOptions is not None else [], np.uint8))
    output = graph.tensors[op.outputs[0]]
    shape = list(output.shape if output.shape is not None else [])
    if len(raw) < 12 or len(op.inputs) != 3 or len(shape) != 4 or min(shape) < 1 or any(
            d < 0 for d in (output.shapeSignature if output.shapeSignature is not None else [])):
        return False
    padding, stride_w, stride_h = (int(v) for v in np.frombuffer(raw[:12], np.int32))
    if padding not in TFLITE_PADDING:
        return False
    options = s.TransposeConvOptionsT()
    options.padding = getattr(s.Padding, TFLITE_PADDING[padding])
    options.strideW, options.strideH = stride_w, stride_h
    sizes = _constant(model, graph, f"{output.name.decode()}/output_shape",
                      np.array(shape, np.int32))
    data, weights, bias = op.inputs
    op.opcodeIndex = _opcode(model, s.BuiltinOperator.TRANSPOSE_CONV, version=3)  # 3: a bias
    op.inputs = [sizes, weights, data, bias]
    op.builtinOptionsType, op.builtinOptions = s.BuiltinOptions.TransposeConvOptions, options
    op.customOptions = None
    return True


def _opcode(model, builtin: int, version: int) -> int:
    """The index of the operator code of `builtin`, at `version` or later."""
    for index, code in enumerate(model.operatorCodes):
        if code.builtinCode == builtin:
            code.version = max(code.version, version)
            return index
    code = schema().OperatorCodeT()
    code.builtinCode, code.version = builtin, version
    code.deprecatedBuiltinCode = min(builtin, PLACEHOLDER_FOR_GREATER_OP_CODES)
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def _buffer(model, values: np.ndarray) -> int:
    buffer = schema().BufferT()
    buffer.data = np.frombuffer(np.ascontiguousarray(values).tobytes(), np.uint8)
    model.buffers.append(buffer)
    return len(model.buffers) - 1


def _constant(model, graph, name: str, values: np.ndarray) -> int:
    """A new int32 constant tensor in `graph`; its index."""
    tensor = schema().TensorT()
    tensor.name, tensor.shape = name.encode(), list(values.shape)
    tensor.type, tensor.buffer = schema().TensorType.INT32, _buffer(model, values)
    graph.tensors.append(tensor)
    return len(graph.tensors) - 1


def _fp16_constant(model, graph, op) -> np.ndarray | None:
    """The float16 weights a DEQUANTIZE op reads, or None where it reads anything else."""
    s = schema()
    if model.operatorCodes[op.opcodeIndex].builtinCode != s.BuiltinOperator.DEQUANTIZE:
        return None
    tensor = graph.tensors[op.inputs[0]]
    data = model.buffers[tensor.buffer].data
    if tensor.type != s.TensorType.FLOAT16 or data is None or not len(data):
        return None
    return np.frombuffer(bytes(data), np.float16)


def _dequantize_fp16(model) -> int:
    """float16 constants behind DEQUANTIZE ops made float32 constants: the op's output
    tensor (what the consumers read) takes the weights, the op and its float16 input go."""
    done = 0
    for index, graph in enumerate(model.subgraphs):
        kept = []
        for op in graph.operators:
            weights = _fp16_constant(model, graph, op)
            if weights is None:
                kept.append(op)
                continue
            graph.tensors[op.outputs[0]].buffer = _buffer(model, weights.astype(np.float32))
            done += 1
        if len(kept) < len(graph.operators):
            graph.operators = kept
            _drop_unused_tensors(model, graph, index)
    if done:
        _clear_unused_buffers(model)
    return done


def _drop_unused_tensors(model, graph, index: int) -> None:
    """Tensors no op, graph input or output, or signature names: removed, every index
    into the subgraph's tensors renumbered."""
    signatures = [sig for sig in model.signatureDefs or [] if sig.subgraphIndex == index]
    maps = [m for sig in signatures for m in [*(sig.inputs or []), *(sig.outputs or [])]]
    used = {i for op in graph.operators
            for i in [*op.inputs, *op.outputs, *(op.intermediates or [])] if i >= 0}
    used |= {*graph.inputs, *graph.outputs, *(m.tensorIndex for m in maps)}
    order = sorted(used)
    new = {old: position for position, old in enumerate(order)}
    graph.tensors = [graph.tensors[i] for i in order]
    for op in graph.operators:
        op.inputs = [new[i] if i >= 0 else i for i in op.inputs]
        op.outputs = [new[i] for i in op.outputs]
        if op.intermediates is not None:
            op.intermediates = [new[i] for i in op.intermediates]
    graph.inputs = [new[i] for i in graph.inputs]
    graph.outputs = [new[i] for i in graph.outputs]
    for tensor_map in maps:
        tensor_map.tensorIndex = new[tensor_map.tensorIndex]


def _clear_unused_buffers(model) -> None:
    """Buffers no tensor or metadata refers to any more emptied (their indices stay)."""
    used = {t.buffer for graph in model.subgraphs for t in graph.tensors}
    used |= {m.buffer for m in model.metadata or []}
    for index, buffer in enumerate(model.buffers):
        if index not in used:
            buffer.data = None


def _add_signature(model) -> bool:
    """A serving_default SignatureDef over subgraph 0's inputs and outputs, named after
    their tensors, where the file has no signature at all."""
    if model.signatureDefs:
        return False
    s, graph = schema(), model.subgraphs[0]
    signature = s.SignatureDefT()
    signature.signatureKey, signature.subgraphIndex = b"serving_default", 0
    signature.inputs = _tensor_maps(graph, graph.inputs, "input")
    signature.outputs = _tensor_maps(graph, graph.outputs, "output")
    model.signatureDefs = [signature]
    return True


def _tensor_maps(graph, indices, kind: str) -> list:
    """Signature entries for `indices`, each named after its tensor (or kind_N where the
    tensor has no name, or one an earlier entry took)."""
    maps, taken = [], set()
    for position, index in enumerate(indices):
        name = (graph.tensors[index].name or b"").decode()
        if not name or name in taken:
            name = f"{kind}_{position}"
        taken.add(name)
        entry = schema().TensorMapT()
        entry.name, entry.tensorIndex = name.encode(), index
        maps.append(entry)
    return maps
