"""Which ops of a model an accelerator takes, before anything runs.

Op-support tables are data, each naming where it came from. `list_ops` reads the nodes of
an ONNX model (the onnx package, with shape inference) or a TFLite model (its flatbuffer,
through LiteRT's schema module: no interpreter, so Edge TPU-compiled models read too);
`check` sets each node against a table: supported or not, and where it would run, with
the generic checks accelerators need (static shapes; int8 everywhere on the Edge TPU; the
Edge TPU compiler's single subgraph and its 3-innermost-dimensions rule).
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from runtimes.placement import node_flops


class ModelUnreadable(Exception):
    """The model file is missing, of an unknown kind, or not a model; the message says so."""


@dataclass(frozen=True)
class OpTable:
    name: str
    accelerator: str
    format: str                        # "onnx" or "tflite": the op names it uses
    ops: dict                          # op type -> constraint ("" when none is listed)
    source: str
    static_shapes: bool = False        # dynamic dimensions keep a node off the accelerator
    int8_only: bool = False            # float tensors keep a node off the accelerator
    single_subgraph: bool = False      # ops fed by an op left on the CPU stay there too
    innermost_3d: bool = False         # only the 3 innermost dims of a tensor may be > 1
    article: str = "the "

    @property
    def the(self) -> str:
        """"the Edge TPU", "TensorRT": the accelerator's name in a sentence."""
        return self.article + self.accelerator


# source: Coral, "TensorFlow models on the Edge TPU", table "Supported operations"
# (a copy of an early version of that table in a public repository), plus ops the Edge
# TPU compiler (versions 14-16) logs as "Mapped to Edge TPU" in google-coral/edgetpu
# issues: QUANTIZE, REDUCE_MAX, RESIZE_NEAREST_NEIGHBOR; TRANSPOSE_CONV (Coral's table,
# quoted in issue 684; mapped in issue 686). Logged as not supported: TRANSPOSE
# (issues 242, 342). Requirements on the same page: 8-bit quantized tensors, sizes
# constant at compile time, only the 3 innermost dimensions of a tensor larger than 1;
# the compiler maps one subgraph ("More than one subgraph is not supported" in its log
# for supported ops fed by an op on the CPU).
EDGETPU = OpTable(
    name="edgetpu", accelerator="Edge TPU", format="tflite",
    source="Coral 'TensorFlow models on the Edge TPU' supported-operations table and "
           "Edge TPU compiler logs (google-coral/edgetpu issues)",
    static_shapes=True, int8_only=True, single_subgraph=True, innermost_3d=True,
    ops={
        "ADD": "", "AVERAGE_POOL_2D": "no fused activation function",
        "CONCATENATION": "no fused activation; a constant input must be all zeros, with "
                         "exactly 2 inputs",
        "CONV_2D": "", "DEPTHWISE_CONV_2D": "",
        "FULLY_CONNECTED": "default weights format only; one-dimensional output",
        "L2_NORMALIZATION": "", "LOGISTIC": "", "MAX_POOL_2D": "no fused activation function",
        "MAXIMUM": "", "MEAN": "reduction along x and/or y only", "MINIMUM": "", "MUL": "",
        "PAD": "padding along x and/or y only", "QUANTIZE": "", "REDUCE_MAX": "",
        "RELU": "", "RELU6": "", "RELU_N1_TO_1": "", "RESHAPE": "",
        "RESIZE_BILINEAR": "3-D input/output; may stay on the CPU to keep precision",
        "RESIZE_NEAREST_NEIGHBOR": "3-D input/output; may stay on the CPU to keep precision",
        "SLICE": "", "SOFTMAX": "1-D input of at most 16,000 elements",
        "SPACE_TO_DEPTH": "", "SPLIT": "",
        "SQUEEZE": "only when no relayout is needed (leading 1s)",
        "STRIDED_SLICE": "strides all 1, ellipsis and new-axis masks 0", "SUB": "",
        "TANH": "", "TRANSPOSE_CONV": "",
        "edgetpu-custom-op": "already compiled for the Edge TPU",
    })

# source: onnxruntime, onnxruntime/core/providers/qnn/builder/op_builder_factory.cc (the
# ONNX op types the QNN execution provider builds; microsoft/onnxruntime at 00cd7c6).
# Static shapes and QDQ for the HTP backend: this project's DEPENDENCIES.md (onnxruntime-qnn
# on x86 Linux). Checked on the HTP simulator (onnxruntime-qnn, onnxruntime 1.32): a static
# CNN ran as one partition, an Erf (not listed) on the CPU between two partitions, and a
# dynamic batch dimension left every node on the CPU.
QNN_HTP = OpTable(
    name="qualcomm-htp", accelerator="Qualcomm HTP (QNN)", format="onnx",
    source="onnxruntime QNN execution provider op builders (op_builder_factory.cc)",
    static_shapes=True,
    ops=dict.fromkeys((
        "Abs", "Add", "And", "ArgMax", "ArgMin", "Asin", "Atan", "AveragePool",
        "BatchNormalization", "Cast", "Ceil", "Clip", "Concat", "Conv", "ConvTranspose", "Cos",
        "CumSum", "DepthToSpace", "DequantizeLinear", "Div", "Einsum", "Elu", "Equal", "Exp",
        "Expand", "Flatten", "Floor", "FusedMatMul", "Gather", "GatherElements", "GatherND",
        "Gelu", "Gemm", "GlobalAveragePool", "GlobalMaxPool", "Greater", "GreaterOrEqual",
        "GridSample", "HardSigmoid", "HardSwish", "InstanceNormalization", "Inverse",
        "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax",
        "LpNormalization", "LRN", "LSTM", "MatMul", "Max", "MaxPool", "Mean", "Min", "Mod",
        "Mul", "Neg", "Not", "Or", "Pad", "Pow", "PRelu", "QuantizeLinear",
        "RandomUniformLike", "Reciprocal", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin",
        "ReduceProd", "ReduceSum", "Relu", "Reshape", "Resize", "RMSNormalization", "Round",
        "ScatterElements", "ScatterND", "Sigmoid", "Sign", "Sin", "Slice", "Softmax",
        "SpaceToDepth", "Split", "Sqrt", "Squeeze", "STFT", "Sub", "Sum", "Tanh",
        "ThresholdedRelu", "Tile", "TopK", "Transpose", "Unsqueeze", "Upsample", "Where"), ""))

# source: onnx-tensorrt docs/operators.md, "Supported ONNX Operators" (TensorRT 8.5, opsets
# up to 17): the operators marked Y, with their listed restrictions.
TENSORRT = OpTable(
    name="tensorrt", accelerator="TensorRT", format="onnx", article="",
    source="onnx-tensorrt docs/operators.md (TensorRT 8.5 support matrix)",
    ops={**dict.fromkeys((
        "Abs", "Acos", "Acosh", "Add", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan",
        "Atanh", "BatchNormalization", "Cast", "Ceil", "Celu", "Clip", "Concat", "Constant",
        "ConstantOfShape", "Conv", "ConvTranspose", "Cos", "Cosh", "DepthToSpace", "Div",
        "Dropout", "Elu", "Equal", "Erf", "Exp", "Expand", "EyeLike", "Flatten", "Floor",
        "Gather", "GatherElements", "GatherND", "Gemm", "GlobalAveragePool", "GlobalLpPool",
        "GlobalMaxPool", "Greater", "GreaterOrEqual", "GridSample", "HardSigmoid", "HardSwish",
        "Identity", "ImageScaler", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Log",
        "LogSoftmax", "Loop", "LRN", "LpNormalization", "LpPool", "MatMul", "Max", "Mean",
        "MeanVarianceNormalization", "Min", "Mod", "Mul", "Neg", "NonMaxSuppression",
        "NonZero", "Not", "OneHot", "Or", "Pad", "ParametricSoftplus", "Pow", "PRelu",
        "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Range",
        "Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
        "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "Relu",
        "Reshape", "RoiAlign", "Round", "ScaledTanh", "Scan", "Scatter", "ScatterElements",
        "ScatterND", "Selu", "Shape", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Size",
        "Softmax", "Softplus", "Softsign", "SpaceToDepth", "Split", "Sqrt", "Sub", "Sum",
        "Tan", "Tanh", "ThresholdedRelu", "Tile", "Transpose", "Trilu", "Upsample", "Where",
        "Xor"), ""),
        "AveragePool": "2D or 3D pooling only", "CumSum": "axis must be an initializer",
        "DequantizeLinear": "x_zero_point must be zero",
        "Einsum": "no ellipsis, diagonal or broadcasting between inputs",
        "GRU": "bidirectional: same activations both ways",
        "If": "branch outputs broadcastable, with different names",
        "InstanceNormalization": "scale and B initializers; input rank 3-5",
        "LSTM": "bidirectional: same activations both ways",
        "MaxPool": "2D or 3D pooling only; no Indices output",
        "QuantizeLinear": "y_zero_point must be 0",
        "Resize": "modes nearest and linear only", "ReverseSequence": "no dynamic input shapes",
        "RNN": "bidirectional: same activations both ways",
        "Slice": "axes must be an initializer", "Squeeze": "axes must be an initializer",
        "TopK": "K must be an initializer", "Unsqueeze": "axes must be a constant tensor"})

# source: onnxruntime, onnxruntime/core/providers/openvino/ov_versions/data_ops.cc at
# ad69456 (OpenVINO 2023.0): the ops listed for the "VPUX" device, which the OpenVINO
# execution provider later renamed NPU (intel/onnxruntime pull request 313). Later versions
# of that file list no NPU ops and leave the choice to OpenVINO's NPU plugin, so this
# table is a floor. The NPU has no dynamic shapes (OpenVINO "Supported Devices" table).
OPENVINO_NPU = OpTable(
    name="openvino-npu", accelerator="Intel NPU (OpenVINO)", format="onnx",
    source="onnxruntime OpenVINO execution provider data_ops.cc (VPUX/NPU list, OpenVINO "
           "2023.0)",
    static_shapes=True,
    ops=dict.fromkeys((
        "Abs", "Add", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Constant",
        "ConstantOfShape", "Conv", "Cos", "CumSum", "DepthToSpace", "DequantizeLinear", "Div",
        "Dropout", "Elu", "Equal", "Erf", "Exp", "Expand", "EyeLike", "Flatten", "Gather",
        "Gemm", "GlobalAveragePool", "Greater", "GreaterOrEqual", "Identity", "ImageScaler",
        "InstanceNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LRN", "MatMul",
        "Max", "MaxPool", "Mean", "Min", "Mul", "Neg", "Pad", "Pow", "PRelu", "QuantizeLinear",
        "Range", "Reciprocal", "ReduceMean", "Relu", "Reshape", "Shape", "Shrink", "Sigmoid",
        "Sign", "Sin", "Slice", "Softmax", "Softplus", "SpaceToDepth", "Split", "Sqrt",
        "Squeeze", "Sub", "Sum", "Tanh", "ThresholdedRelu", "Tile", "TopK", "Transpose",
        "Unsqueeze", "Upsample", "Where"), ""))

TABLES = {t.name: t for t in (EDGETPU, QNN_HTP, TENSORRT, OPENVINO_NPU)}

# export presets whose accelerator has a table
PRESET_TABLES = {"edgetpu": "edgetpu", "qualcomm-htp": "qualcomm-htp",
                 "intel-npu": "openvino-npu"}

# ONNX nodes onnxruntime's basic graph optimizations remove (constant folding, identity
# and dropout elimination) before execution providers are assigned: never placed.
REMOVED_BEFORE_PLACEMENT = {"Constant", "Identity", "Dropout"}


def table_for_provider(name: str, options: dict | None = None) -> OpTable | None:
    """The table of an onnxruntime execution provider as configured, if there is one."""
    options = options or {}
    if name == "TensorrtExecutionProvider":
        return TENSORRT
    if name == "QNNExecutionProvider":
        backend = f"{options.get('backend_type', '')} {options.get('backend_path', '')}"
        return QNN_HTP if "htp" in backend.lower() or not backend.strip() else None
    if name == "OpenVINOExecutionProvider":
        return OPENVINO_NPU if "NPU" in str(options.get("device_type", "")).upper() else None
    return None


def table_for_delegate(library: str) -> OpTable | None:
    return EDGETPU if "edgetpu" in os.path.basename(library).lower() else None


def table_for(accelerator: str, options: dict | None = None) -> OpTable | None:
    """The table of an engine's accelerator (runtimes.engines' `accelerators`): an
    onnxruntime execution provider as configured, or a LiteRT delegate library."""
    return table_for_provider(accelerator, options) or table_for_delegate(accelerator)


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


def list_ops(path: str) -> ModelOps:
    """The nodes of an .onnx or .tflite model, with tensor shapes and types."""
    if not os.path.isfile(path):
        raise ModelUnreadable(f"model file not found: {path}")
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".onnx":
        return _onnx_ops(path)
    if suffix == ".tflite":
        return _tflite_ops(path)
    raise ModelUnreadable(f"{path}: the model must be an .onnx or a .tflite file")


def _onnx_ops(path: str) -> ModelOps:
    import onnx
    from onnx import helper, shape_inference

    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as exc:  # protobuf DecodeError, OSError
        raise ModelUnreadable(f"{path} is not a readable ONNX model: "
                              f"{' '.join(str(exc).split())[:200]}") from None
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


def _tflite_ops(path: str) -> ModelOps:
    from ai_edge_litert import schema_py_generated as fb

    op_names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    type_names = {v: k.lower() for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
    with open(path, "rb") as fh:
        buf = fh.read()
    try:
        if not fb.Model.ModelBufferHasIdentifier(buf, 0):
            raise ValueError("no TFL3 identifier")
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
