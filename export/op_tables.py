"""Op-support tables, as data: which ops an accelerator takes (Edge TPU, Qualcomm HTP,
TensorRT, an OpenVINO NPU), each naming where it came from, with the generic checks its
compiler applies; and the table of an execution provider or a delegate as configured.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


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
