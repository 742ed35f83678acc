"""Engines: what runs a model file, one module each, registered here.

An engine module describes itself with one `Engine` record (the file suffixes it opens,
the modules whose presence says it is installed, the pip package that installs it on a
device; the artifact formats it runs are the format table's, runtimes/formats.py) and
the four functions the rest of the project calls instead of naming the engine: open a
session, report where each node ran, turn the settings into the runner's command-line
flags, and add those flags to the runner.
Everything about one engine is in its module; adding an engine is one module imported at
the bottom of this file and, at most, one profile key.

Every engine reads its own fields of one `Settings` record and ignores the rest, so the
runner and the benchmark stage pass settings around without knowing which engine takes
which.

    base.py      The `Engine` record, the `Settings` every engine reads, the registry
    ort.py       onnxruntime: .onnx files on the CPU or an execution provider
    litert.py    LiteRT (ai-edge-litert, or tflite-runtime): .tflite files, XNNPACK or a delegate
    ov.py        OpenVINO: ONNX files and OpenVINO IR (.xml), compiled for a device
"""
from __future__ import annotations

import argparse
import importlib.util
import os
from runtimes.engines.base import REGISTRY as _REGISTRY
from runtimes.engines.base import Engine, Settings, option_text, register  # noqa: F401 (the registry's API)
from runtimes import formats
from runtimes.errors import ProviderUnavailable, RuntimeInputError


def names() -> tuple[str, ...]:
    """Every engine, in registration order (the first for a suffix is its default)."""
    return tuple(_REGISTRY)


def get(name: str) -> Engine:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise RuntimeInputError(f"unknown engine '{name}'; known: "
                                f"{', '.join(_REGISTRY)}") from None


def reference() -> str:
    """The engine every speed-up is also quoted against: the first registered
    (onnxruntime), what a user runs an exported model with when nothing chose for them."""
    return next(iter(_REGISTRY))


def for_path(path: str) -> tuple[Engine, ...]:
    """The engines that open `path`, by its suffix, the default first."""
    suffix = os.path.splitext(path)[1].lower()
    return tuple(e for e in _REGISTRY.values() if suffix in e.suffixes)


def default_for(path: str) -> Engine:
    found = for_path(path)
    if not found:
        known = ", ".join(sorted({s for e in _REGISTRY.values() for s in e.suffixes}))
        raise RuntimeInputError(f"no runtime for '{path}': the file suffix must be one of "
                                f"{known}")
    return found[0]


def for_format(fmt: str) -> tuple[Engine, ...]:
    """The engines that run artifacts of the pipeline's format `fmt` (the format table's,
    runtimes/formats.py), in registration order."""
    named = formats.engines_of(fmt)
    return tuple(e for e in _REGISTRY.values() if e.name in named)


def installed(engine: Engine) -> bool:
    """Whether one of the engine's modules can be imported here (without importing it)."""
    for module in engine.modules:
        try:
            if importlib.util.find_spec(module) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def chosen(path: str, name: str | None) -> Engine:
    """The engine `name` (which must open `path`), or the default for `path`."""
    if name is None:
        return default_for(path)
    engine = get(name)
    if engine not in for_path(path):
        raise RuntimeInputError(f"engine {name} does not open '{path}': it opens "
                                f"{', '.join(engine.suffixes)} files")
    if not installed(engine):  # exit 3: nothing to measure with here, never another engine
        raise ProviderUnavailable(f"{name} is not installed here (pip install {engine.pip})")
    return engine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every engine's runner flags, a group each."""
    for engine in _REGISTRY.values():
        engine.add_arguments(parser.add_argument_group(engine.name))


def settings_from(args: argparse.Namespace, threads: int | None) -> Settings:
    fields = {"threads": threads}
    for engine in _REGISTRY.values():
        fields.update(engine.settings_from(args))
    return check(Settings(**fields))


def check(settings: Settings) -> Settings:
    """`settings`, after every engine has checked its own fields go together (a profile
    is checked when it is read, the runner's flags when they are parsed)."""
    for engine in _REGISTRY.values():
        engine.check(settings)
    return settings


# the engines, in order: the first that opens a suffix is its default
from runtimes.engines import ort, litert, ov  # noqa: E402,F401  (each registers itself)
