"""What an engine module is made of: the `Engine` record, the `Settings` every engine
reads its own fields of, and the registry the modules add themselves to (runtimes.engines
reads it). Apart from the package so that an engine module, and what it calls, never
import the package that imports them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

GPU_DELEGATE = "gpu"   # the LiteRT `delegate` value that picks its GPU accelerator


@dataclass(frozen=True)
class Settings:
    """How a session is opened. Each engine reads the fields it has (named in its
    module's docstring); the others keep their defaults."""
    threads: int | None = None
    providers: tuple = ()            # onnxruntime: (name, {option: value}) in priority order
    xnnpack: bool = True             # LiteRT: the XNNPACK delegate (off: built-in kernels)
    delegate: str | None = None      # LiteRT: "gpu" or an external delegate library
    delegate_options: dict = field(default_factory=dict)
    xnnpack_weight_cache: str | None = None  # LiteRT: a directory for XNNPACK's packed weights
    precision: str = "f32"           # OpenVINO: inference precision (f32, bf16, f16)
    device: str = "CPU"              # OpenVINO: the device it compiles for

    def __post_init__(self):  # None is "none given" for the collections (callers pass it)
        object.__setattr__(self, "providers", tuple(self.providers or ()))
        object.__setattr__(self, "delegate_options", dict(self.delegate_options or {}))


@dataclass(frozen=True)
class Engine:
    name: str
    suffixes: tuple[str, ...]        # model files it opens (".onnx"); the pipeline's
    #                                  formats it runs are the format table's
    modules: tuple[str, ...]         # importable modules, any one of which means installed
    pip: str                         # the package that installs it on a device
    open: Callable                   # (path, Settings) -> runtimes.session.Session
    placement: Callable              # (path, Settings, session description, the timed
    #                                  feeds or None) -> dict
    flags: Callable                  # Settings -> the runner's flags for them
    add_arguments: Callable          # (argparse group) -> None: those flags
    settings_from: Callable          # parsed arguments -> {Settings field: value}
    accelerated: Callable = lambda settings: False  # placement worth reporting
    accelerators: Callable = lambda settings: ()  # Settings -> ((name, options), ...): what
    #                                  it hands nodes to, in priority order (the CPU: the rest)
    preload: Callable = lambda settings: None  # import what `settings` will use (before
    #                                            the idle memory reading)
    check: Callable = lambda settings: None  # Settings -> None, or RuntimeInputError for
    #                                          settings of its own that cannot go together


REGISTRY: dict[str, Engine] = {}


def option_text(value) -> str:
    """A setting's value as a runner flag's text (booleans as 0/1)."""
    return str(int(value)) if isinstance(value, bool) else str(value)


def register(engine: Engine) -> Engine:
    if engine.name in REGISTRY:
        raise ValueError(f"engine {engine.name!r} is registered twice")
    REGISTRY[engine.name] = engine
    return engine
