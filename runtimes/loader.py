"""`load(path, ...)`: pick the adapter for a model file."""
from __future__ import annotations

import os

from runtimes.errors import RuntimeInputError
from runtimes.session import Session

ENGINES_BY_SUFFIX = {".onnx": "onnxruntime", ".tflite": "litert"}


def engine_for(path: str) -> str:
    suffix = os.path.splitext(path)[1].lower()
    try:
        return ENGINES_BY_SUFFIX[suffix]
    except KeyError:
        known = ", ".join(sorted(ENGINES_BY_SUFFIX))
        raise RuntimeInputError(
            f"no runtime for '{path}': the file suffix must be one of {known}") from None


def load(path: str, engine: str | None = None, threads: int | None = None,
         providers: list[str] | None = None, xnnpack: bool = True,
         delegate: str | None = None, delegate_options: dict | None = None) -> Session:
    """Open `path` with its engine. `providers` is for onnxruntime; `xnnpack`, `delegate`
    ("gpu": LiteRT's GPU accelerator; else an external delegate library) and its
    `delegate_options` for LiteRT."""
    engine = engine or engine_for(path)
    if engine == "onnxruntime":
        from runtimes.onnx_session import OnnxRuntimeSession
        return OnnxRuntimeSession(path, threads=threads, providers=providers)
    if engine == "litert" and delegate == "gpu":
        from runtimes.litert_gpu import LiteRTGpuSession
        return LiteRTGpuSession(path, threads=threads, options=delegate_options)
    if engine == "litert":
        from runtimes.litert_session import LiteRTSession
        return LiteRTSession(path, threads=threads, xnnpack=xnnpack, delegate=delegate,
                             delegate_options=delegate_options)
    raise RuntimeInputError(f"unknown engine '{engine}'; known: onnxruntime, litert")
