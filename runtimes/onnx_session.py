"""onnxruntime adapter."""
from __future__ import annotations

import os
import platform

import numpy as np

from runtimes.errors import ProviderUnavailable, RuntimeInputError
from runtimes.plugin_eps import attach, register_plugins
from runtimes.session import Session, TensorSpec

# onnxruntime reports element types as strings like "tensor(float)".
_ORT_TO_NUMPY = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8",
    "tensor(uint8)": "uint8", "tensor(bool)": "bool", "tensor(int16)": "int16",
    "tensor(uint16)": "uint16", "tensor(uint32)": "uint32", "tensor(uint64)": "uint64",
}


CPU = "CPUExecutionProvider"


def _provider_lists(providers: list) -> tuple[list[str], list[dict]]:
    """Names and string options for InferenceSession, the CPU provider last; '~' in a
    path option is the device user's home."""
    names, options = [], []
    for entry in providers:
        name, opts = (entry, {}) if isinstance(entry, str) else entry
        if name == CPU:
            continue
        names.append(name)
        options.append({key: os.path.expanduser(str(value)) if isinstance(value, str) else
                        str(int(value)) if isinstance(value, bool) else str(value)
                        for key, value in opts.items()})
    return names + [CPU], options + [{}]


def check_available(names: list[str], available: list[str]) -> None:
    missing = [name for name in names if name not in available]
    if missing:
        raise ProviderUnavailable(
            f"{', '.join(missing)} is not available in this onnxruntime (it has "
            f"{', '.join(available)}); install the onnxruntime build that carries it on the "
            "machine that measures")


def load_nvidia_libraries(ort, names: list[str]) -> None:
    """CUDA, cuDNN and TensorRT from pip (onnxruntime-gpu[cuda,cudnn], nvidia-cublas,
    tensorrt-cu13) are not on the loader's path: onnxruntime-gpu's preload_dlls loads the
    first two, as `import torch` would in a process that has torch (this one has not), and
    importing tensorrt loads its libnvinfer. What is not installed is left to the system's
    paths (JetPack, a CUDA toolkit), and failing that to the 'did not start' check."""
    if {"CUDAExecutionProvider", "TensorrtExecutionProvider"} & set(names):
        preload = getattr(ort, "preload_dlls", None)
        if preload is not None:
            preload(directory="")   # pip's nvidia packages, then the system's own paths
    if "TensorrtExecutionProvider" in names:
        try:
            import tensorrt  # noqa: F401
        except (ImportError, OSError):
            pass


# x86-64 CPUs without VNNI multiply u8 activations by s8 weights with VPMADDUBSW, which adds
# two products into a saturating int16: with 8-bit weights a pair reaches 2 x 255 x 127 and
# clips, and an INT8 model runs wrong on that CPU alone (a per-channel Conv/Gemm/MatMul
# net measured on an AMD EPYC with AVX2 and no VNNI: largest error 1.37 of 2.31, against
# 0.11 with the reference kernels). This option has onnxruntime run such layers u8 x u8
# there, exactly as the file says; other CPUs (VNNI, Arm) are left as they are.
EXACT_INT8 = ("session.x64quantprecision", "1")


def session_options():
    """The onnxruntime SessionOptions every session of this project starts from: INT8
    layers computed as the file says on every CPU (EXACT_INT8)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.add_session_config_entry(*EXACT_INT8)
    return options


def timed_session_options(threads: int | None, providers: list | None = None,
                          configure=None):
    """The options of a session that is timed: session_options, this many intra-op
    threads that keep spinning between runs, warnings off on the CPU provider alone;
    `configure(options)` last."""
    options = session_options()
    if not providers:  # on the CPU provider alone, errors only: its warnings repeat
        options.log_severity_level = 3  # per call (ddddocr's wrong output shape)
    if threads:
        options.intra_op_num_threads = int(threads)
        options.inter_op_num_threads = 1
    # A benchmark must not be skewed by threads spinning after each run.
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    if configure is not None:
        configure(options)
    return options


def _start(ort, path: str, options, providers: list | None):
    """The InferenceSession on the providers asked for (the CPU provider last), with a
    plugin provider attached through its devices."""
    names, provider_options = _provider_lists(providers or [])
    load_nvidia_libraries(ort, names)
    plugins = register_plugins(ort, names)
    check_available(names, ort.get_available_providers() + plugins)
    if plugins and len(names) > 2:
        raise RuntimeInputError(f"{plugins[0]} is a plugin provider: ask for it alone "
                                "(the CPU provider still takes what it leaves)")
    if plugins:  # attached through its devices; the CPU provider comes with the session
        attach(ort, options, names[0], provider_options[0])
    try:
        session = (ort.InferenceSession(path, options) if plugins else
                   ort.InferenceSession(path, options, providers=names,
                                        provider_options=provider_options))
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise _load_error(str(exc).strip().splitlines()[0], names, path) from None
    # onnxruntime drops a provider that fails to start (a missing CUDA library) with a
    # warning and runs on the CPU: that is not the accelerator's number.
    dropped = [n for n in names if n not in session.get_providers()]
    if dropped:
        raise ProviderUnavailable(
            f"{', '.join(dropped)} {'is' if len(dropped) == 1 else 'are'} installed but "
            f"did not start for {path} (onnxruntime "
            "left it out, see its warning above); check the driver and libraries")
    return session


def _load_error(said: str, names: list[str], path: str) -> Exception:
    """What onnxruntime's error `said` when it could not start the session means."""
    if len(names) > 1 and ": EP_FAIL :" in said:
        # the provider started but could not compile this model here (QNN's HTP
        # simulator runs out of memory finalizing some graphs on some x86 CPUs):
        # nothing to measure on it, which is not the user's input at fault
        return ProviderUnavailable(
            f"{', '.join(names[:-1])} could not compile {path} on this machine: {said}")
    if len(names) > 1:  # an accelerator was asked for: most often its options
        return RuntimeInputError(
            f"onnxruntime cannot start {', '.join(names[:-1])} for {path}: {said}. "
            "Check the provider's options in the profile (QNN needs backend_type, "
            "e.g. htp) and that the model suits it")
    return RuntimeInputError(
        f"onnxruntime cannot load {path}: {said}. Check that the file is a complete "
        "ONNX model (re-export it if it was truncated or edited).")


class OnnxRuntimeSession(Session):
    engine = "onnxruntime"

    def __init__(self, path: str, threads: int | None = None,
                 providers: list | None = None, configure=None):
        """`providers`: names or (name, options) pairs in priority order; the CPU provider
        is always last, for the nodes no other provider takes. `configure(options)` may
        change the SessionOptions before the session is built (runtimes.placement turns
        profiling on)."""
        import onnxruntime as ort  # the device extra installs it; imported late for speed

        if not os.path.isfile(path):
            raise RuntimeInputError(f"model file not found: {path}")
        options = timed_session_options(threads, providers, configure)
        self._session = _start(ort, path, options, providers)
        self.threads = threads
        self._version = ort.__version__
        self.inputs = tuple(
            TensorSpec(i.name, tuple(d if isinstance(d, int) else None for d in i.shape),
                       _ORT_TO_NUMPY.get(i.type, i.type))
            for i in self._session.get_inputs())
        self.outputs = tuple(o.name for o in self._session.get_outputs())

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._session.run(None, feeds)

    def describe(self) -> dict:
        providers = self._session.get_providers()
        info = {"engine": self.engine, "version": self._version, "threads": self.threads,
                "providers": providers}
        # QNN's HTP backend on an x86-64 host is Qualcomm's simulator of the HTP: real
        # placement and real numerics, but its timings are not a Snapdragon's.
        if "QNNExecutionProvider" in providers and platform.machine() in ("x86_64", "AMD64"):
            info["simulated"] = "the QNN HTP backend simulated on an x86-64 CPU"
        return info
