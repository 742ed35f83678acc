"""Every artifact format, declared once: one row each (gguf-py's one table of formats).

A row says what a file or folder of that format is: its kind (a tensor model, timed on
feeds, or a language model, timed in tokens/s and scored on text), how a message names
it, how it is recognized from its path, the engines that open it (the default first;
none: it is compressed, never deployed), the export stage that makes the source's float
model in this format (the baseline every variant is compared with) and the source format
that stage takes, how its size is counted, and how it ships (a file, with its weights
file beside it where it keeps them apart, or a whole folder).

Every place that asks "is this a language model", "which engines run it", "what makes
its baseline" or "how big is it" reads the row (tests/test_layering.py holds that no
other module maps a format name to such a fact). Adding a format is one row here and,
for a language model, its engine in runtimes/lm/engines.py.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from runtimes.errors import RuntimeInputError
from runtimes.lm import genai, llamacpp, ovgenai

TENSOR, LANGUAGE = "tensor", "language"     # the two kinds of model
LATENCY, TOKENS = "latency", "tokens"       # the benchmark's workload for each kind
FILE, FOLDER = "file", "folder"             # how an artifact ships


def model_files(path: str) -> list[str]:
    """The files of a model: the file, and its weights beside it where it keeps them apart:
    <name>.data for an ONNX model of 2 GiB or more (which protobuf cannot hold in one
    file), <stem>.bin for an OpenVINO IR (<stem>.xml)."""
    stem, suffix = os.path.splitext(path)
    beside = stem + ".bin" if suffix.lower() == ".xml" else path + ".data"
    return [path, beside] if os.path.isfile(beside) else [path]


def file_bytes(path) -> int:
    """A file model's size: the file and its weights file (model_files)."""
    return sum(os.path.getsize(part) for part in model_files(str(path)))


def _suffix(*suffixes: str) -> Callable[[Path], bool]:
    return lambda path: Path(path).suffix.lower() in suffixes and Path(path).is_file()


@dataclass(frozen=True)
class Format:
    name: str                       # what the pipeline's artifacts call the format
    kind: str                       # TENSOR or LANGUAGE
    noun: str                       # how a message names a model of this format
    accepts: Optional[Callable[[Path], bool]]  # whether a path holds a model of this
    #                                  format (None: a source, named by its own field)
    engines: tuple[str, ...] = ()   # the engines that open it, the default first
    made_by: Optional[str] = None   # the export stage that makes it from a given model
    made_from: Optional[str] = None  # the format that stage takes
    baseline: bool = False          # made_by also makes the source's float baseline
    size: Optional[Callable[[Path], int]] = None   # the bytes counted as its size
    ships: str = FILE
    given: bool = False             # a pipeline may start from it (`model: {<name>: PATH}`)

    @property
    def workload(self) -> str:
        """What the benchmark times: calls on feeds, or prefill and decode tokens/s."""
        return TOKENS if self.kind == LANGUAGE else LATENCY

    @property
    def deployable(self) -> bool:
        """Whether the benchmark measures it (an engine opens it)."""
        return bool(self.engines)


FORMATS = (
    Format("torch", TENSOR, "a torch model", None, given=True),
    Format("onnx", TENSOR, "an ONNX model", _suffix(".onnx"), ("onnxruntime", "openvino"),
           "export.onnx", "torch", baseline=True, size=file_bytes, given=True),
    Format("tflite", TENSOR, "a TFLite model", _suffix(".tflite"), ("litert",),
           "export.tflite", "torch", baseline=True, size=file_bytes, given=True),
    # its float baseline is the ONNX file run on OpenVINO (the same engine, no second export)
    Format("openvino", TENSOR, "an OpenVINO IR model", _suffix(".xml"), ("openvino",),
           "export.openvino", "onnx", size=file_bytes),
    Format("causal_lm", LANGUAGE, "a causal language model (Hugging Face weights)", None,
           ships=FOLDER, given=True),
    Format("genai", LANGUAGE, "an onnxruntime-genai model folder", genai.accepts,
           ("onnxruntime-genai",), "export.genai", "causal_lm", baseline=True,
           size=genai.folder_bytes, ships=FOLDER),
    Format("gguf", LANGUAGE, "a GGUF file (llama.cpp)", llamacpp.accepts, ("llama.cpp",),
           "export.gguf", "causal_lm", baseline=True, size=llamacpp.file_bytes),
    Format("ovgenai", LANGUAGE, "an OpenVINO GenAI model folder (a stateful OpenVINO IR)",
           ovgenai.accepts, ("openvino-genai",), "export.ovgenai", "causal_lm",
           baseline=True, size=ovgenai.folder_bytes, ships=FOLDER),
)
_BY_NAME = {row.name: row for row in FORMATS}


def get(name: str) -> Format:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise RuntimeInputError(f"unknown model format '{name}'; known: "
                                f"{', '.join(_BY_NAME)}") from None


def names(kind: str | None = None, **facts) -> tuple[str, ...]:
    """The formats of `kind` (any kind: None) whose rows have every fact given
    (`names(LANGUAGE, deployable=True)`), in the table's order."""
    return tuple(row.name for row in FORMATS if kind in (None, row.kind)
                 and all(getattr(row, key) == value for key, value in facts.items()))


def is_language(name: str) -> bool:
    """Whether artifacts of format `name` are a language model's (unknown: no)."""
    return name in _BY_NAME and _BY_NAME[name].kind == LANGUAGE


def engines_of(name: str) -> tuple[str, ...]:
    """The engines that open format `name` (an unknown format: none)."""
    return _BY_NAME[name].engines if name in _BY_NAME else ()


def run_by(engine: str) -> tuple[str, ...]:
    """The formats `engine` opens, in the table's order."""
    return tuple(row.name for row in FORMATS if engine in row.engines)


def of_path(path: str | Path, kind: str | None = None) -> Format:
    """The deployable format of `kind` that `path` holds; RuntimeInputError naming
    every such format when it holds none."""
    rows = [row for row in FORMATS if row.deployable and kind in (None, row.kind)]
    found = next((row for row in rows if row.accepts(Path(path))), None)
    if found is None:
        what = "a language model" if kind == LANGUAGE else "a model"
        raise RuntimeInputError(f"{path} is not {what} this runner opens: it should be "
                                + " or ".join(row.noun for row in rows))
    return found
