"""LiteRT (TFLite) adapter.

The interpreter comes from `ai-edge-litert` (the successor of tflite-runtime), else
`tflite_runtime` (devices that still run numpy 1.x), else TensorFlow's `tf.lite`. XNNPACK
is the default CPU delegate; `xnnpack=False` runs the built-in kernels instead.

Quantized inputs and outputs (full-int8 models, as Edge TPU and microcontroller
deployments need) are handled here: callers feed and receive float arrays, converted
with each tensor's scale and zero point, so metrics compare like with like.
"""
from __future__ import annotations

import ctypes
import importlib
import os

import numpy as np

from runtimes.errors import ProviderUnavailable, RuntimeInputError
from runtimes.session import Session, TensorSpec

INSTALL_HINT = ("pip install ai-edge-litert (or tflite-runtime on a device whose numpy is "
                "1.x)")


def interpreter_module():
    """The first TFLite interpreter module that imports, with `Interpreter` in it."""
    for name in ("ai_edge_litert.interpreter", "tflite_runtime.interpreter"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    try:
        import tensorflow as tf
    except ImportError:
        raise RuntimeInputError(f"no TFLite runtime is installed: {INSTALL_HINT}") from None
    return tf.lite


def load_delegate(library: str, module=None, options: dict | None = None):
    """An external delegate (an Edge TPU's libedgetpu.so.1, an NPU's libvx_delegate.so),
    with the `options` it documents (the Edge TPU's {"device": "usb:0"}), as strings.

    Raises ProviderUnavailable naming the library when it cannot be loaded, which on a
    machine without that hardware's runtime is the common case: nothing can be measured
    for that accelerator here (never a CPU run in its place)."""
    module = module or interpreter_module()
    loader = getattr(module, "load_delegate", None) or module.experimental.load_delegate
    try:
        # dlopen it first: a failed load_delegate leaves a half-built Delegate whose
        # destructor prints a traceback of its own.
        ctypes.CDLL(library)
        return loader(library, {str(k): str(v) for k, v in (options or {}).items()} or None)
    except (ValueError, OSError, RuntimeError) as exc:
        reason = " ".join(str(exc).split())[:300]
        raise ProviderUnavailable(
            f"the LiteRT delegate '{library}' cannot be loaded on this machine ({reason}). "
            "Install the delegate's runtime (for a Coral Edge TPU: libedgetpu1-std), give "
            "its full path, or leave the delegate out (`runtime.delegate` in the profile, "
            "--delegate on the command line) to run on the CPU with XNNPACK") from None


def _resolver_without_xnnpack(module):
    resolver = getattr(module, "OpResolverType", None)
    if resolver is None:  # tf.lite keeps it under experimental
        resolver = module.experimental.OpResolverType
    return resolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES


def is_quantized(detail: dict) -> bool:
    scale, _ = detail["quantization"]
    return np.issubdtype(detail["dtype"], np.integer) and scale != 0


def dequantized(detail: dict, value: np.ndarray) -> np.ndarray:
    """An output `value` as float when its tensor is quantized (a copy either way)."""
    if is_quantized(detail):
        scale, zero = detail["quantization"]
        return (value.astype(np.float32) - zero) * np.float32(scale)
    return value.copy()


def to_native(detail: dict, value: np.ndarray) -> np.ndarray:
    """`value` as the interpreter's input `detail` takes it: float data quantized through
    the tensor's scale and zero point when the input is quantized."""
    if is_quantized(detail) and not np.issubdtype(value.dtype, np.integer):
        scale, zero = detail["quantization"]
        info = np.iinfo(detail["dtype"])
        value = np.clip(np.round(value / scale + zero), info.min, info.max)
    return np.require(value, dtype=detail["dtype"], requirements="C")  # keeps 0-d inputs 0-d


def input_specs(details: list[dict]) -> tuple[TensorSpec, ...]:
    """The inputs as a session presents them: quantized ones as float (the session
    quantizes them itself), with the type the model stores them in beside."""
    return tuple(
        TensorSpec(d["name"], tuple(int(x) for x in d["shape"]),
                   "float32" if is_quantized(d) else np.dtype(d["dtype"]).name,
                   np.dtype(d["dtype"]).name if is_quantized(d) else None)
        for d in details)


def load_error(path: str, exc: Exception) -> RuntimeInputError:
    text = str(exc).strip().splitlines()[0]
    if "unresolved custom op" in text:
        # e.g. MediaPipe's Convolution2DTransposeBias: XNNPACK, LiteRT's default delegate,
        # runs it; the built-in kernels alone (xnnpack off) have none
        return RuntimeInputError(
            f"LiteRT cannot load {path}: {text} The op has no built-in kernel: it runs "
            "where a delegate takes it (XNNPACK, on unless xnnpack is turned off) or with a "
            "LiteRT build that registers it")
    return RuntimeInputError(
        f"LiteRT cannot load {path}: {text}. Check that the file is a complete .tflite "
        "model (re-export it)")


def new_interpreter(path: str, threads: int | None = None, xnnpack: bool = True,
                    delegate: str | None = None, delegate_options: dict | None = None):
    """(module, interpreter) for `path`, not yet allocated: an external `delegate` is
    applied by now, XNNPACK (unless `xnnpack` is off) by the first allocate_tensors."""
    if not os.path.isfile(path):
        raise RuntimeInputError(f"model file not found: {path}")
    module = interpreter_module()
    # None is one thread in ai-edge-litert (int(num_threads or 1)) but "the runtime's
    # choice" in older tflite-runtime: said explicitly, the record is true for both
    kwargs = {"model_path": path, "num_threads": threads or 1}
    if delegate:
        kwargs["experimental_delegates"] = [load_delegate(delegate, module, delegate_options)]
    if not xnnpack:
        kwargs["experimental_op_resolver_type"] = _resolver_without_xnnpack(module)
    try:
        return module, module.Interpreter(**kwargs)
    except (ValueError, RuntimeError) as exc:
        raise load_error(path, exc) from None


def _delegate_nodes(interpreter) -> int | None:
    details = getattr(interpreter, "_get_ops_details", None)   # None: an old tf.lite
    return None if details is None else sum(op["op_name"] == "DELEGATE" for op in details())


class LiteRTSession(Session):
    engine = "litert"

    def __init__(self, path: str, threads: int | None = None, xnnpack: bool = True,
                 delegate: str | None = None, delegate_options: dict | None = None):
        module, self._interpreter = new_interpreter(path, threads, xnnpack, delegate,
                                                    delegate_options)
        delegated = _delegate_nodes(self._interpreter)
        try:
            self._interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as exc:
            raise load_error(path, exc) from None
        # XNNPACK is applied by allocate_tensors, or silently not at all where it cannot
        # start (cpuinfo finding no processors): then the built-in kernels were measured
        after = _delegate_nodes(self._interpreter)
        self.xnnpack_applied = None if after is None else xnnpack and after > delegated
        self.threads, self.xnnpack, self.delegate = threads or 1, xnnpack, delegate
        self.delegate_options = dict(delegate_options or {})
        self._module_name = module.__name__
        self._inputs = self._interpreter.get_input_details()
        self._outputs = self._interpreter.get_output_details()
        self.inputs = input_specs(self._inputs)
        self.outputs = tuple(d["name"] for d in self._outputs)

    def native_feeds(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {d["name"]: to_native(d, feeds[d["name"]]) for d in self._inputs}

    def _set_input(self, detail: dict, value: np.ndarray) -> None:
        value = to_native(detail, value)
        if tuple(value.shape) != tuple(detail["shape"]):  # e.g. another batch size
            self._interpreter.resize_tensor_input(detail["index"], value.shape)
            self._interpreter.allocate_tensors()
            self._inputs = self._interpreter.get_input_details()
            self._outputs = self._interpreter.get_output_details()
        self._interpreter.set_tensor(detail["index"], value)

    def _get_output(self, detail: dict) -> np.ndarray:
        return dequantized(detail, self._interpreter.get_tensor(detail["index"]))

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        for detail in list(self._inputs):
            self._set_input(detail, feeds[detail["name"]])
        self._interpreter.invoke()
        return [self._get_output(detail) for detail in self._outputs]

    def describe(self) -> dict:
        return {"engine": self.engine, "interpreter": self._module_name, "threads": self.threads,
                "xnnpack": self.xnnpack, "xnnpack_applied": self.xnnpack_applied,
                "delegate": self.delegate,
                **({"delegate_options": self.delegate_options} if self.delegate_options else {}),
                "quantized_io": any(is_quantized(d) for d in [*self._inputs, *self._outputs])}
