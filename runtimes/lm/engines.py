"""The language-model engines: every module of runtimes/lm that defines an `ENGINE` record
(runtimes/lm/stream.py's LMEngine: the packages that bring it, what a device must import
to run it, how to load its libraries and open a model, its KV cache's size), found here,
so adding an engine is its module and its format's row (runtimes/formats.py). The
tokens/s measurement (bench.py) and the quality scoring go through `for_path`, never
through one engine by name.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path

import runtimes.lm
from runtimes import formats
from runtimes.errors import RuntimeInputError
from runtimes.lm.stream import LMEngine


@functools.cache
def all_engines() -> tuple[LMEngine, ...]:
    """Every engine, in its module's name order (found on first use: an engine module
    may import this one)."""
    found = []
    for module in sorted(pkgutil.iter_modules(runtimes.lm.__path__), key=lambda m: m.name):
        engine = getattr(importlib.import_module(f"runtimes.lm.{module.name}"), "ENGINE", None)
        if isinstance(engine, LMEngine):
            found.append(engine)
    return tuple(found)


def get(name: str) -> LMEngine:
    by_name = {engine.name: engine for engine in all_engines()}
    try:
        return by_name[name]
    except KeyError:
        raise RuntimeInputError(f"unknown language-model engine '{name}'; known: "
                                f"{', '.join(by_name)}") from None


def for_path(path: str | Path) -> tuple[formats.Format, LMEngine]:
    """The language-model format `path` holds and the engine that opens it (the format's
    default); RuntimeInputError naming every format when it is none of them."""
    row = formats.of_path(path, formats.LANGUAGE)
    return row, get(row.engines[0])
