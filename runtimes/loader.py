"""`load(path, ...)`: open a model file with its engine (runtimes.engines)."""
from __future__ import annotations

import os

from runtimes import engines
from runtimes.formats import model_files  # noqa: F401  (also imported from here)
from runtimes.session import Session


def engine_for(path: str) -> str:
    """The default engine's name for `path` (by its suffix)."""
    return engines.default_for(path).name


def load(path: str, engine: str | None = None, settings: engines.Settings | None = None,
         **fields) -> Session:
    """Open `path` with `engine` (default: the first that opens its suffix) and
    `settings`, or the engines.Settings fields given by name (threads, providers, xnnpack,
    delegate, delegate_options, precision, device)."""
    return engines.chosen(path, engine).open(path, settings or engines.Settings(**fields))
