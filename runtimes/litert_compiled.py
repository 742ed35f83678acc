"""LiteRT's CompiledModel API: its GPU accelerator (`delegate: gpu` in a profile,
`--delegate gpu` for the runner), and its CPU accelerator where XNNPACK's weight cache is
asked for (`xnnpack_weight_cache`, `--xnnpack-weight-cache DIR`: runtimes.xnnpack_cache),
which the Interpreter API cannot give.

ai-edge-litert 2.x ships its GPU accelerator in the wheel (libLiteRtWebGpuAccelerator.so:
WebGPU, on Vulkan under Linux) and reaches it through the CompiledModel API, not the
Interpreter's delegate list. The classic TFLite GPU delegate has no Linux build to
install; one built from source loads like any external delegate, by its path.

The model is compiled for the GPU with the CPU for the ops the GPU does not take. When
the GPU accelerator cannot start (no GPU, no Vulkan driver, a GPU WebGPU refuses),
LiteRT refuses to compile rather than running on the CPU, and the session raises
ProviderUnavailable with the reason LiteRT logged: the benchmark is 'unmeasured', never
a CPU run reported as the GPU.

Inputs and outputs go through LiteRT tensor buffers (a copy in, a copy out per run, as a
deployment that feeds host memory does), with the same float-in / float-out handling of
quantized tensors as the interpreter session.
"""
from __future__ import annotations

import atexit
import ctypes
import dataclasses
import functools
import os
import platform
import re
import sys

import numpy as np

from runtimes import xnnpack_cache
from runtimes.engines.base import GPU_DELEGATE
from runtimes.errors import ProviderUnavailable, RuntimeInputError
from runtimes.litert_session import (dequantized, input_specs, is_quantized, load_error,
                                     new_interpreter, to_native)
from runtimes.native_log import native_output_captured
from runtimes.session import Session

GPU_LABEL = "LiteRT GPU"      # where nodes ran, in placement reports
SPLIT_UNREPORTED = "LiteRT GPU or CPU (split not reported)"

# What LiteRT logs about the GPU when it cannot start: the reason for 'unmeasured'.
_GPU_WORDS = ("vulkan", "webgpu", "adapter", "gpu")
_LOG_PREFIX = re.compile(r"^(INFO|WARNING|ERROR|E\d+|W\d+)[^\]]*\]\s*|^(Warning|error):\s*")


def _compiled_model_api():
    try:
        from ai_edge_litert import compiled_model
    except ImportError:
        raise ProviderUnavailable(
            "LiteRT's GPU accelerator and XNNPACK's weight cache need ai-edge-litert 2.x (its "
            "CompiledModel API): pip install 'ai-edge-litert>=2.0'; tflite-runtime has "
            "neither") from None
    return compiled_model


_AT_HWCAP, _HWCAP_ATOMICS = 16, 1 << 8    # getauxval's key; aarch64's LSE bit in it


def _missing_cpu_feature() -> str | None:
    """What the CompiledModel runtime needs that this CPU lacks. ai-edge-litert 2.3's
    aarch64 build uses the ARMv8.1 LSE atomics and kills the process with SIGILL where
    they are missing ("compiled with lse enabled, but this feature is not available"):
    seen on a Cortex-A72, the Raspberry Pi 4's core, emulated. The kernel's hardware
    capabilities say it (also under qemu-user, which /proc/cpuinfo does not)."""
    if platform.machine() not in ("aarch64", "arm64") or sys.platform != "linux":
        return None
    hwcap = _hwcap()
    return None if hwcap is None or hwcap & _HWCAP_ATOMICS else "the ARMv8.1 LSE atomics"


def _hwcap() -> int | None:
    try:
        getauxval = ctypes.CDLL(None).getauxval
    except (OSError, AttributeError):
        return None
    getauxval.restype, getauxval.argtypes = ctypes.c_ulong, [ctypes.c_ulong]
    return int(getauxval(_AT_HWCAP))


def gpu_option_names() -> tuple[str, ...]:
    """The GPU accelerator's options (fields of ai-edge-litert's GpuOptions)."""
    return tuple(f.name for f in dataclasses.fields(_compiled_model_api().GpuOptions))


def _flag(key: str, value) -> bool:
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise RuntimeInputError(f"GPU option {key}={value!r}: give true or false")


def gpu_options(api, options: dict | None):
    """ai-edge-litert GpuOptions from {name: value}; unknown names are refused."""
    known = gpu_option_names()
    unknown = sorted(set(options or {}) - set(known))
    if unknown:
        raise RuntimeInputError(
            f"the LiteRT GPU accelerator has no option {', '.join(map(repr, unknown))}; its "
            f"options are: {', '.join(known)}")
    return api.GpuOptions(**{k: _flag(k, v) for k, v in (options or {}).items()})


def compile_model(path: str, accelerator: str = GPU_DELEGATE, threads: int | None = None,
                  options: dict | None = None, weight_cache: str | None = None):
    """A CompiledModel of `path` on the GPU accelerator with CPU fallback, or
    ProviderUnavailable with what LiteRT said when the GPU cannot be used here.
    `accelerator="cpu"` compiles for the CPU alone (XNNPACK): the same API and buffers on
    any machine, which is how this module is tested where there is no GPU.
    `weight_cache`: the file XNNPACK keeps its packed weights in (runtimes.xnnpack_cache
    names it)."""
    if not os.path.isfile(path):
        raise RuntimeInputError(f"model file not found: {path}")
    api = _compiled_model_api()
    missing = _missing_cpu_feature()
    if missing:
        raise ProviderUnavailable(
            f"ai-edge-litert's CompiledModel runtime (LiteRT's GPU accelerator, XNNPACK's "
            f"weight cache) needs {missing}, which this CPU lacks (a Raspberry Pi 4's "
            "Cortex-A72 is ARMv8.0): it would stop the process. Leave `delegate: gpu` and "
            "`xnnpack_weight_cache` out here; the interpreter runs the model")
    accel = api.HardwareAccelerator
    wanted = accel.CPU if accelerator == "cpu" else accel.GPU | accel.CPU
    cpu = api.CpuOptions(num_threads=threads or os.cpu_count(),
                         xnnpack_weight_cache_path=weight_cache or "")
    settings = api.Options(hardware_accelerators=wanted, cpu_options=cpu,
                           gpu_options=gpu_options(api, options))
    failure = None
    with native_output_captured() as log:
        environment = api.Environment.create(runtime_path=os.path.dirname(api.__file__))
        try:
            return api.CompiledModel.from_file(path, options=settings,
                                               environment=environment)
        except RuntimeError as exc:
            failure = str(exc).strip()
            environment.close()   # now, while its teardown log is still captured
    if accelerator == "cpu":   # nothing to be unavailable: the model does not load
        raise load_error(path, RuntimeError(failure))
    raise ProviderUnavailable(_unavailable(path, _gpu_log_lines(log.text) or [failure]))


def _gpu_log_lines(text: str) -> list[str]:
    """LiteRT's log lines about the GPU, without their severity and source prefixes."""
    lines: list[str] = []
    for line in text.splitlines():
        low = line.lower()
        if (not any(word in low for word in _GPU_WORDS) or "compiler_plugin" in low
                or low.startswith("info") or "destroyaccelerator" in low):
            continue
        line = _LOG_PREFIX.sub("", " ".join(line.split()))
        if line.startswith(("at ", "- While")) or "third_party/" in line:
            continue   # where in Dawn's source it was said, not what
        if line and line not in lines:
            lines.append(line)
    return lines


def _unavailable(path: str, said: list[str]) -> str:
    return (f"the LiteRT GPU accelerator cannot compile {os.path.basename(path)} on this "
            f"machine ({'; '.join(said)[:400]}). It needs a GPU with a Vulkan driver "
            "(libvulkan.so.1 and the vendor's ICD) that WebGPU accepts; run it where one is, "
            "or leave `delegate: gpu` out to measure on the CPU")


@functools.cache
def _quiet_exit() -> None:
    """That environment is destroyed only as the process ends, after Python's last
    output, logging each accelerator again: fd 2 is pointed at /dev/null then (Python
    runs atexit handlers before the C++ library's destructors). Once per process."""

    def silence() -> None:
        sys.stderr.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
    atexit.register(silence)


class CompiledSession(Session):
    engine = "litert"

    def __init__(self, path: str, threads: int | None = None, options: dict | None = None,
                 accelerator: str = GPU_DELEGATE, weight_cache_dir: str | None = None):
        # Tensor names and quantization from an interpreter that is never allocated:
        # the compiled model reports neither scales nor zero points.
        _, interpreter = new_interpreter(path, threads, xnnpack=False)
        self._inputs = interpreter.get_input_details()
        self._outputs = interpreter.get_output_details()
        del interpreter
        # the CPU alone runs one thread unless told, as the interpreter session does
        self.threads = threads or (1 if accelerator == "cpu" else None)
        self.options, self.accelerator = dict(options or {}), accelerator
        self.weight_cache = None
        cache = xnnpack_cache.cache_file(path, weight_cache_dir) if weight_cache_dir else None
        existed = bool(cache) and os.path.exists(cache)
        self._model = compile_model(path, accelerator, self.threads, options, cache)
        if cache:
            self.weight_cache = xnnpack_cache.describe_file(cache, existed)
        signatures = self._model.get_signature_list()
        if not signatures:
            raise load_error(path, ValueError("the model has no signature, which LiteRT's "
                                              "CompiledModel API runs models by"))
        self._signature = next(iter(signatures))
        self._order_by_signature()
        self.fully_accelerated = self._model.is_fully_accelerated()
        self._new_buffers()
        self.inputs = input_specs(self._inputs)
        self.outputs = tuple(d["name"] for d in self._outputs)

    def _order_by_signature(self) -> None:
        """Interpreter details in the signature's order, which buffers are created in."""
        def ordered(details: list[dict], compiled: dict) -> list[dict]:
            by_name = {d["name"]: d for d in details}
            names = [c["name"] for c in compiled.values()]
            return [by_name[n] for n in names] if set(names) == set(by_name) else details
        self._inputs = ordered(self._inputs, self._model.get_input_tensor_details(self._signature))
        self._outputs = ordered(self._outputs,
                                self._model.get_output_tensor_details(self._signature))

    def _new_buffers(self) -> None:
        """Buffers for the compiled shapes, which are kept so run() compares against them
        without asking LiteRT each time."""
        self._in_buffers = self._model.create_input_buffers(0)
        self._out_buffers = self._model.create_output_buffers(0)
        self._in_shapes, self._out_shapes = (
            [tuple(int(x) for x in c["shape"]) for c in details(self._signature).values()]
            for details in (self._model.get_input_tensor_details,
                            self._model.get_output_tensor_details))
        # ai-edge-litert 2.3 makes a LiteRT environment of its own at the first buffer
        # write of the process, logging each accelerator it registers: written here, with
        # zeros, where that log is kept off the screen (the model is not run).
        with native_output_captured():
            for buffer, detail, shape in zip(self._in_buffers, self._inputs, self._in_shapes):
                buffer.write(np.zeros(shape, detail["dtype"]))
        _quiet_exit()

    def native_feeds(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {d["name"]: to_native(d, feeds[d["name"]]) for d in self._inputs}

    def _fit_shapes(self, values: list[np.ndarray]) -> None:
        """Another batch size than the compiled one: resize and make new buffers."""
        changed = [i for i, (value, shape) in enumerate(zip(values, self._in_shapes))
                   if tuple(value.shape) != shape]
        if not changed:
            return
        try:
            for index in changed:
                self._model.resize_input_tensor(index, values[index].shape, strict=False)
            self._new_buffers()
        except RuntimeError as exc:
            shapes = ", ".join(str(tuple(values[i].shape)) for i in changed)
            raise RuntimeInputError(
                f"the model cannot run inputs of shape {shapes} on the LiteRT GPU "
                f"accelerator ({' '.join(str(exc).split())[-160:]}); export it for that batch "
                "size") from None

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        values = [to_native(d, feeds[d["name"]]) for d in self._inputs]
        self._fit_shapes(values)
        for buffer, value in zip(self._in_buffers, values):
            buffer.write(value)
        self._model.run_by_index(0, self._in_buffers, self._out_buffers)
        results = []
        for detail, buffer, shape in zip(self._outputs, self._out_buffers, self._out_shapes):
            raw = buffer.read(int(np.prod(shape)), detail["dtype"]).reshape(shape)
            results.append(dequantized(detail, raw))
        return results

    def describe(self) -> dict:
        on_cpu = self.accelerator == "cpu"   # XNNPACK is LiteRT's CPU accelerator
        return {"engine": self.engine, "interpreter": "ai_edge_litert.compiled_model",
                "threads": self.threads, "xnnpack": True if on_cpu else None,
                "delegate": None if on_cpu else self.accelerator,
                **({"delegate_options": self.options} if self.options else {}),
                "fully_accelerated": self.fully_accelerated,
                **({"xnnpack_weight_cache": self.weight_cache} if self.weight_cache else {}),
                "quantized_io": any(is_quantized(d) for d in [*self._inputs, *self._outputs])}

    def close(self) -> None:
        if self._model is None:
            return
        with native_output_captured():   # LiteRT logs each accelerator it tears down
            environment = self._model.environment
            self._in_buffers = self._out_buffers = []
            self._model = None
            environment.close()
