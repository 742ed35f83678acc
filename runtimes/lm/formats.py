"""The language-model formats this runner opens, one row each: how to recognize the path,
the engine that runs it, its weights' size on disk and its KV cache's size. The tokens/s
measurement (bench.py) goes through `format_of`, never through one engine by name, so a
format is one row here and one module beside it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from runtimes.errors import RuntimeInputError
from runtimes.lm import genai, llamacpp


@dataclass(frozen=True)
class Format:
    name: str                    # what the pipeline's artifacts call the format
    what: str                    # how an error names the path this format wants
    engine: str
    packages: tuple[str, ...]    # the distributions that bring the engine (its version)
    modules: tuple[str, ...]     # what a device must import to run it (any one of them)
    accepts: Callable[[Path], bool]
    runtime: Callable[[], object]  # loads the engine's libraries (a clear error if missing)
    open: Callable               # (path, threads, provider=, **options) -> the stream calls
    weights_bytes: Callable[[Path], int]
    kv_cache_bytes: Callable[[Path, int], int]


FORMATS = (
    Format("genai", "an onnxruntime-genai model folder (with its genai_config.json)",
           "onnxruntime-genai", ("onnxruntime-genai", "onnxruntime-genai-cuda"),
           ("onnxruntime_genai",), genai.accepts, genai.import_genai,
           lambda path, threads, provider=None, **_: genai.GenaiModel(path, threads,
                                                                       provider),
           genai.folder_bytes, genai.kv_cache_bytes),
    Format("gguf", "a .gguf file", "llama.cpp", ("llama-cpp-python",), ("llama_cpp",),
           llamacpp.accepts,
           llamacpp.import_llama_cpp,
           lambda path, threads, **options: llamacpp.LlamaCppModel(path, threads, **options),
           llamacpp.file_bytes, llamacpp.kv_cache_bytes),
)


def format_of(path: str | Path) -> Format:
    path = Path(path)
    for found in FORMATS:
        if found.accepts(path):
            return found
    raise RuntimeInputError(f"{path} is not a language model this runner opens: "
                            + " or ".join(f.what for f in FORMATS))



NAMES = tuple(found.name for found in FORMATS)   # the pipeline's language-model formats


def engine_of(fmt: str) -> str | None:
    """The engine that runs the pipeline's artifact format `fmt`; None for a format that is
    not a language model's."""
    return next((found.engine for found in FORMATS if found.name == fmt), None)
