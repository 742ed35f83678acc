"""onnxruntime: .onnx files, on the CPU provider or the execution providers asked for
(`Settings.providers`, in priority order; the CPU provider takes what they leave)."""
from __future__ import annotations

from runtimes.engines.base import Engine, Settings, option_text, register
from runtimes.errors import RuntimeInputError

CPU_PROVIDER = "CPUExecutionProvider"   # takes what the others leave: no accelerator


def _open(path: str, settings: Settings):
    from runtimes.onnx_session import OnnxRuntimeSession
    return OnnxRuntimeSession(path, threads=settings.threads,
                              providers=list(settings.providers) or None)


def _placement(path: str, settings: Settings, described: dict, feeds=None) -> dict:
    """From a profiled run of its own on `feeds` (the timed inputs)."""
    from runtimes.placement import onnx_placement
    return onnx_placement(path, list(settings.providers), threads=settings.threads,
                          feeds=feeds)


def _flags(settings: Settings) -> list[str]:
    flags = []
    for name, options in settings.providers:
        flags += ["--provider", name]
        for key, value in options.items():
            flags += ["--provider-option", f"{name}:{key}={option_text(value)}"]
    return flags


def _add_arguments(group) -> None:
    group.add_argument("--provider", action="append", default=[], metavar="NAME",
                       help="an execution provider, in priority order (repeat it; the CPU "
                       "provider is always last). Exit code 3 when it is not available")
    group.add_argument("--provider-option", action="append", default=[],
                       metavar="NAME:KEY=VALUE", help="an option of a --provider")


def parse_providers(names: list[str], options: list[str]) -> tuple:
    """--provider NAME and --provider-option NAME:KEY=VALUE -> ((name, {key: value}), ...)."""
    chosen = {name: {} for name in names}
    for text in options:
        name, _, pair = text.partition(":")
        key, equals, value = pair.partition("=")
        if not equals or not key or name not in chosen:
            raise RuntimeInputError(f"--provider-option '{text}': write NAME:KEY=VALUE for a "
                                    f"NAME given with --provider ({', '.join(chosen) or 'none'})")
        chosen[name][key] = value
    return tuple(chosen.items())


def _preload(settings: Settings) -> None:
    import onnxruntime  # noqa: F401


ENGINE = register(Engine(
    name="onnxruntime", suffixes=(".onnx",), modules=("onnxruntime",),
    pip="onnxruntime", open=_open, placement=_placement, flags=_flags,
    add_arguments=_add_arguments,
    settings_from=lambda args: {"providers": parse_providers(args.provider,
                                                             args.provider_option)},
    accelerated=lambda settings: bool(settings.providers), preload=_preload,
    accelerators=lambda settings: tuple((name, dict(options)) for name, options
                                        in settings.providers if name != CPU_PROVIDER)))
