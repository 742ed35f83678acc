"""`load(path, ...)`: open a model file with its engine (runtimes.engines)."""
from __future__ import annotations

import os

from runtimes import engines
from runtimes.session import Session


def model_files(path: str) -> list[str]:
    """The files of a model: the file, and its weights beside it where it keeps them apart:
    <name>.data for an ONNX model of 2 GiB or more (which protobuf cannot hold in one
    file), <stem>.bin for an OpenVINO IR (<stem>.xml)."""
    stem, suffix = os.path.splitext(path)
    beside = stem + ".bin" if suffix.lower() == ".xml" else path + ".data"
    return [path, beside] if os.path.isfile(beside) else [path]


def engine_for(path: str) -> str:
    """The default engine's name for `path` (by its suffix)."""
    return engines.default_for(path).name


def load(path: str, engine: str | None = None, settings: engines.Settings | None = None,
         **fields) -> Session:
    """Open `path` with `engine` (default: the first that opens its suffix) and
    `settings`, or the engines.Settings fields given by name (threads, providers, xnnpack,
    delegate, delegate_options, precision, device)."""
    return engines.chosen(path, engine).open(path, settings or engines.Settings(**fields))
