"""OpenVINO (the `openvino` package): ONNX files and OpenVINO IR (.xml beside its .bin),
compiled for a device (CPU unless told) with a latency hint and an explicit inference
precision.

The precision is always set. On a CPU with bf16 support (AMX, AVX-512 BF16) OpenVINO's
default runs a float model in bf16, so a baseline called FP32 would not be one: "f32"
is the default here, "bf16" and "f16" are variants that say so in their description.
Integer layers of a quantized (QDQ) model run in int8 whatever the precision.

Where each node ran comes from the compiled model's runtime graph: every executed node
names its layer type, the original nodes it took, and the precision it ran in.
"""
from __future__ import annotations

import os

import numpy as np

from runtimes.errors import EngineCannotOpen, ProviderUnavailable, RuntimeInputError

# what OpenVINO says of a model with an op it cannot convert or run
UNSUPPORTED_MARKS = ("OpConversionFailure", "No conversion rule", "wasn't fully converted",
                     "Unsupported operation")
from runtimes.session import Session, TensorSpec

PRECISIONS = {"f32": "f32", "bf16": "bf16", "f16": "f16"}   # ours -> OpenVINO's hint
SUFFIXES = (".onnx", ".xml")
_NOT_COMPUTE = ("Const", "Input", "Parameter", "Output", "Result")


def _core():
    try:
        import openvino as ov
    except ImportError:
        raise RuntimeInputError("the engine openvino needs the openvino package: "
                                "pip install openvino") from None
    return ov, ov.Core()


def compile_model(path: str, threads: int | None, precision: str, device: str):
    """(openvino module, compiled model) for `path`, as the benchmark runs it."""
    if not os.path.isfile(path):
        raise RuntimeInputError(f"model file not found: {path}")
    if precision not in PRECISIONS:
        raise RuntimeInputError(f"OpenVINO precision '{precision}': use one of "
                                f"{', '.join(PRECISIONS)}")
    ov, core = _core()
    if device not in core.available_devices:
        raise ProviderUnavailable(f"OpenVINO device {device} is not on this machine (it has "
                                  f"{', '.join(core.available_devices) or 'none'})")
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": PRECISIONS[precision]}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    try:
        return ov, core.compile_model(core.read_model(path), device, config)
    except Exception as exc:  # noqa: BLE001 - OpenVINO raises its own untyped errors
        said = " ".join(str(exc).split())[:400]
        # an op its frontend has no rule for is this engine's gap (another may run the
        # model); any other failure is the file's
        gap = any(mark in said for mark in UNSUPPORTED_MARKS)
        raise (EngineCannotOpen if gap else RuntimeInputError)(
            f"OpenVINO cannot load {path} on {device}: {said}") from None


def _spec(port) -> TensorSpec:
    shape = tuple(d.get_length() if d.is_static else None for d in port.get_partial_shape())
    return TensorSpec(port.get_any_name(), shape, np.dtype(port.get_element_type().to_dtype()).name)


class OpenVinoSession(Session):
    engine = "openvino"

    def __init__(self, path: str, threads: int | None = None, precision: str = "f32",
                 device: str = "CPU"):
        ov, self._compiled = compile_model(path, threads, precision, device)
        self._request = self._compiled.create_infer_request()
        self._version = ov.get_version()
        self.threads, self.precision, self.device = threads, precision, device
        self.inputs = tuple(_spec(port) for port in self._compiled.inputs)
        self.outputs = tuple(port.get_any_name() for port in self._compiled.outputs)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        # copies of the outputs: the request's own buffers are overwritten by the next call
        result = self._request.infer({spec.name: feeds[spec.name] for spec in self.inputs},
                                     share_outputs=False)
        return [np.asarray(result[port]) for port in self._compiled.outputs]

    def describe(self) -> dict:
        hint = self._compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
        return {"engine": self.engine, "version": self._version, "device": self.device,
                "threads": self.threads, "precision": self.precision,
                "inference_precision_hint": hint,
                "execution_devices": list(self._compiled.get_property("EXECUTION_DEVICES"))}


def _text(info: dict, key: str) -> str:
    return info[key].astype(str) if key in info else ""


# OpenVINO's layer types as the ONNX op whose FLOP count (flops.node_flops) they share
_AS_ONNX = {"Convolution": "Conv", "GroupConvolution": "Conv", "FullyConnected": "MatMul"}


def _static(shape) -> list[int] | None:
    return [d.get_length() for d in shape] if shape.is_static else None


def _flops(kind: str, node) -> int | None:
    """flops.node_flops of the node's shapes; a grouped convolution's weight [groups,
    out, in, kh, kw] read as ONNX's [groups x out, in, kh, kw]."""
    from runtimes.flops import node_flops
    out = _static(node.get_output_partial_shape(0)) if node.get_output_size() else None
    if out is None:
        return None
    inputs = [_static(node.get_input_partial_shape(i)) for i in range(node.get_input_size())]
    weight = inputs[1] if len(inputs) > 1 else None
    if kind == "GroupConvolution" and weight and len(weight) == 5:
        inputs[1] = [weight[0] * weight[1], *weight[2:]]
    return node_flops(_AS_ONNX.get(kind, kind), inputs, [out])


def openvino_placement(path: str, threads: int | None = None, precision: str = "f32",
                       device: str = "CPU") -> dict:
    """The nodes OpenVINO executes, grouped by device and the precision each ran in."""
    _, compiled = compile_model(path, threads, precision, device)
    nodes = []
    for node in compiled.get_runtime_model().get_ordered_ops():
        info = node.get_rt_info()
        kind = _text(info, "layerType")
        if kind in _NOT_COMPUTE:
            continue
        nodes.append({"op": kind, "where": f"{device} {_text(info, 'runtimePrecision')}",
                      "flops": _flops(kind, node)})
    from runtimes.placement import summarise
    method = ("the compiled model's runtime graph (get_runtime_model): each executed node's "
              "layerType and runtimePrecision")
    return summarise(nodes, "openvino", [device], set(), method)
