"""The language-model engines, one record each: the packages that bring it, what a device
must import to run it, how to load its libraries and open a model, and its KV cache's
size. Which format each opens is the format table's (runtimes/formats.py); the tokens/s
measurement (bench.py) and the quality scoring go through `for_path`, never through one
engine by name, so an engine is one record here and one module beside it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from runtimes import formats
from runtimes.errors import RuntimeInputError
from runtimes.lm import genai, llamacpp


@dataclass(frozen=True)
class LMEngine:
    name: str
    packages: tuple[str, ...]    # the distributions that bring the engine (its version)
    modules: tuple[str, ...]     # what a device must import to run it (any one of them)
    runtime: Callable[[], object]  # loads the engine's libraries (a clear error if missing)
    open: Callable               # (path, threads, provider=, **options) -> the stream calls
    kv_cache_bytes: Callable[[Path, int], int]


ENGINES = (
    LMEngine("onnxruntime-genai", ("onnxruntime-genai", "onnxruntime-genai-cuda"),
             ("onnxruntime_genai",), genai.import_genai,
             lambda path, threads, provider=None, **_: genai.GenaiModel(path, threads,
                                                                         provider),
             genai.kv_cache_bytes),
    LMEngine("llama.cpp", ("llama-cpp-python",), ("llama_cpp",), llamacpp.import_llama_cpp,
             lambda path, threads, **options: llamacpp.LlamaCppModel(path, threads, **options),
             llamacpp.kv_cache_bytes),
)
_BY_NAME = {engine.name: engine for engine in ENGINES}


def get(name: str) -> LMEngine:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise RuntimeInputError(f"unknown language-model engine '{name}'; known: "
                                f"{', '.join(_BY_NAME)}") from None


def for_path(path: str | Path) -> tuple[formats.Format, LMEngine]:
    """The language-model format `path` holds and the engine that opens it (the format's
    default); RuntimeInputError naming every format when it is none of them."""
    row = formats.of_path(path, formats.LANGUAGE)
    return row, get(row.engines[0])
