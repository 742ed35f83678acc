"""Which ops of a model an accelerator takes, before anything runs.

The op-support tables are data (export/op_tables.py). `list_ops` reads the nodes of an
ONNX model (the onnx package, with shape inference) or a TFLite model (its flatbuffer,
through LiteRT's schema module: no interpreter, so Edge TPU-compiled models read too);
`check` sets each node against a table: supported or not, and where it would run, with
the generic checks accelerators need (static shapes; int8 everywhere on the Edge TPU; the
Edge TPU compiler's single subgraph and its 3-innermost-dimensions rule).
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from export.op_tables import OpTable
from runtimes.flops import node_flops


class ModelUnreadable(Exception):
    """The model file is missing, of an unknown kind, or not a model; the message says so."""


# ONNX nodes onnxruntime's basic graph optimizations remove (constant folding, identity
# and dropout elimination) before execution providers are assigned: never placed.
REMOVED_BEFORE_PLACEMENT = {"Constant", "Identity", "Dropout"}


# --- reading models ---------------------------------------------------------------------

@dataclass(frozen=True)
class Tensor:
    shape: tuple | None                # ints; a str or None for a dynamic dimension
    dtype: str                         # numpy name ("float32", "int8"), "" when unknown
    constant: bool = False


_UNKNOWN = Tensor(None, "")


@dataclass(frozen=True)
class Node:
    index: int
    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass
class ModelOps:
    path: str
    format: str                        # "onnx" or "tflite"
    nodes: list[Node]
    tensors: dict[str, Tensor]
    inputs: list[str]                  # graph inputs (not weights)

    def shapes(self, names) -> list:
        return [self.tensors[n].shape if n in self.tensors else None for n in names]

    def flops(self, node: Node) -> int | None:
        return node_flops(node.op, self.shapes(node.inputs), self.shapes(node.outputs))

    def dynamic_inputs(self) -> dict[str, tuple]:
        return {name: self.tensors[name].shape for name in self.inputs
                if _dynamic(self.tensors[name].shape)}


def _dynamic(shape) -> bool:
    return shape is not None and any(not isinstance(d, int) or d < 0 for d in shape)


def list_ops(path: str, model=None) -> ModelOps:
    """The nodes of an .onnx or .tflite model, with tensor shapes and types. `model`: the
    .onnx file's ModelProto as the caller already read it (without its weights' data),
    so that the file is not parsed again whole: onnx.load reads all of it into memory
    before it can refuse a file that is not ONNX."""
    if not os.path.isfile(path):
        raise ModelUnreadable(f"model file not found: {path}")
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".onnx":
        return _onnx_ops(path, model)
    if suffix == ".tflite":
        return _tflite_ops(path)
    raise ModelUnreadable(f"{path}: the model must be an .onnx or a .tflite file")


def _loaded(path: str):
    import onnx
    try:
        return onnx.load(path, load_external_data=False)
    except Exception as exc:  # protobuf DecodeError, OSError
        raise ModelUnreadable(f"{path} is not a readable ONNX model: "
                              f"{' '.join(str(exc).split())[:200]}") from None


def _onnx_ops(path: str, model=None) -> ModelOps:
    from onnx import helper, shape_inference

    model = _loaded(path) if model is None else model
    if not model.ir_version or not model.graph.node:  # an empty file parses as no model
        raise ModelUnreadable(f"{path} is not an ONNX model (it holds no graph); re-export it")
    try:
        model = shape_inference.infer_shapes(model)
    except Exception:  # shapes are only needed for FLOP estimates and shape checks
        pass
    graph = model.graph

    def dtype(elem_type: int) -> str:
        try:
            return helper.tensor_dtype_to_np_dtype(elem_type).name if elem_type else ""
        except (KeyError, ValueError, TypeError):
            return ""

    tensors = {}
    for info in (*graph.input, *graph.value_info, *graph.output):
        kind = info.type.tensor_type
        shape = (tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                       for d in kind.shape.dim) if kind.HasField("shape") else None)
        tensors[info.name] = Tensor(shape, dtype(kind.elem_type))
    for init in graph.initializer:
        tensors[init.name] = Tensor(tuple(init.dims), dtype(init.data_type), constant=True)
    nodes = []
    for index, node in enumerate(graph.node):
        if node.op_type == "Constant":
            for out in node.output:
                old = tensors.get(out, _UNKNOWN)
                tensors[out] = Tensor(old.shape, old.dtype, constant=True)
        nodes.append(Node(index, node.name or f"{node.op_type}_{index}", node.op_type,
                          tuple(i for i in node.input if i), tuple(node.output)))
    inputs = [i.name for i in graph.input if not tensors[i.name].constant]
    return ModelOps(path, "onnx", nodes, tensors, inputs)


def _tflite_bytes(path: str) -> bytes:
    """The file's bytes once its first 8 show a TFLite flatbuffer (the TFL3 identifier at
    bytes 4-8): a large file that is not one is refused before it is read into memory."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        if head[4:8] != b"TFL3":
            raise ModelUnreadable(f"{path} is not a readable TFLite model: it has no TFL3 "
                                  "identifier (not a TFLite flatbuffer)")
        return head + fh.read()


def _tflite_ops(path: str) -> ModelOps:
    from ai_edge_litert import schema_py_generated as fb

    op_names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    type_names = {v: k.lower() for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
    buf = _tflite_bytes(path)
    try:
        model = fb.Model.GetRootAs(buf, 0)
        graph = model.Subgraphs(0)
        tensors = {}
        for t in range(graph.TensorsLength()):
            tensor = graph.Tensors(t)
            shape = tuple(int(d) for d in tensor.ShapeAsNumpy()) if tensor.ShapeLength() else ()
            if tensor.ShapeSignatureLength():
                shape = tuple(int(d) for d in tensor.ShapeSignatureAsNumpy())
            data = model.Buffers(tensor.Buffer()) if tensor.Buffer() > 0 else None
            constant = data is not None and (data.DataLength() > 0 or data.Offset() > 1)
            tensors[str(t)] = Tensor(shape, type_names.get(tensor.Type(), ""), constant)
        nodes = []
        for index in range(graph.OperatorsLength()):
            op = graph.Operators(index)
            code = model.OperatorCodes(op.OpcodeIndex())
            builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
            name = op_names.get(builtin, str(builtin))
            if name == "CUSTOM" and code.CustomCode():
                name = code.CustomCode().decode()
            nodes.append(Node(index, f"{name}:{index}", name,
                              tuple(str(t) for t in op.InputsAsNumpy() if t >= 0)
                              if op.InputsLength() else (),
                              tuple(str(t) for t in op.OutputsAsNumpy())
                              if op.OutputsLength() else ()))
        inputs = [str(t) for t in graph.InputsAsNumpy()] if graph.InputsLength() else []
    except Exception as exc:  # flatbuffers raises struct/index errors on a corrupt file
        raise ModelUnreadable(f"{path} is not a readable TFLite model: "
                              f"{type(exc).__name__}: {exc}") from None
    return ModelOps(path, "tflite", nodes, tensors, inputs)


# --- checking against a table -----------------------------------------------------------

@dataclass
class NodeCheck:
    node: Node
    supported: bool                    # the table lists the op and the generic checks pass
    on_accelerator: bool
    reason: str = ""                   # why not on the accelerator
    note: str = ""                     # the table's constraint for the op
    flops: int | None = None


@dataclass
class Support:
    table: OpTable
    checks: list[NodeCheck]
    dynamic_inputs: dict[str, tuple]
    removed: int = 0                   # nodes removed before placement (not checked)
    warnings: list[str] = field(default_factory=list)

    def fallback(self) -> dict:
        """{"nodes", "op_types", "flops_share"} of the nodes that would not run on the
        accelerator (FLOPs estimated from the shapes)."""
        away = [c for c in self.checks if not c.on_accelerator]
        total = sum(c.flops or 0 for c in self.checks)
        flops = sum(c.flops or 0 for c in away)
        return {"nodes": len(away), "op_types": dict(Counter(c.node.op for c in away)),
                "flops_share": round(flops / total, 6) if total else None}


_FLOAT = ("float16", "float32", "float64", "bfloat16")


def _reason(model: ModelOps, node: Node, table: OpTable) -> str:
    if node.op not in table.ops:
        return f"not supported by {table.accelerator}"
    tensors = [model.tensors.get(name, _UNKNOWN) for name in node.inputs + node.outputs]
    if table.int8_only and any(t.dtype in _FLOAT for t in tensors):
        return f"float tensors ({table.accelerator} runs int8 only)"
    if table.static_shapes and any(_dynamic(t.shape) and not t.constant for t in tensors):
        return f"dynamic shape ({table.accelerator} needs static shapes)"
    if table.innermost_3d and any(t.shape and not t.constant and
                                  any(d > 1 for d in t.shape[:-3] if isinstance(d, int))
                                  for t in tensors):
        return "a tensor has more than the 3 innermost dimensions larger than 1"
    return ""


def check(model: ModelOps, table: OpTable) -> Support:
    """Each node of `model` against `table`, in execution order."""
    if model.format != table.format:
        raise ModelUnreadable(f"{table.accelerator} takes {table.format} models; "
                              f"{model.path} is {model.format}")
    graph_inputs = set(model.inputs)
    from_cpu: set[str] = set()         # tensors produced by a node left on the CPU
    checks, removed = [], 0
    for node in model.nodes:
        if model.format == "onnx" and node.op in REMOVED_BEFORE_PLACEMENT:
            removed += 1
            continue
        reason = _reason(model, node, table)
        supported = not reason
        if supported and table.single_subgraph and from_cpu.intersection(node.inputs):
            reason = "fed by an op on the CPU (the compiler maps one subgraph)"
        # An op the accelerator does not take at the model's inputs (a float QUANTIZE)
        # only feeds the subgraph (assumed from compiler logs where a QUANTIZE stays on
        # the CPU beside mapped ops); anywhere else its outputs keep their consumers off it.
        activations = [i for i in node.inputs if not model.tensors.get(i, _UNKNOWN).constant]
        leading = not supported and all(i in graph_inputs for i in activations)
        if reason and not leading:
            from_cpu.update(node.outputs)
        checks.append(NodeCheck(node, supported, not reason, reason,
                                table.ops.get(node.op, ""), model.flops(node)))
    dynamic = model.dynamic_inputs()
    warnings = []
    if dynamic and table.static_shapes:
        shown = ", ".join(f"{name} {tuple(shape)}" for name, shape in dynamic.items())
        warnings.append(f"dynamic input dimensions ({shown}): {table.accelerator} needs "
                        "static shapes")
    return Support(table, checks, dynamic, removed, warnings)
