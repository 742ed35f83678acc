"""OpenVINO: ONNX files and OpenVINO IR (.xml), compiled for `Settings.device` (CPU by
default) with `Settings.precision` as its inference precision (f32 by default: on a CPU
with bf16 support OpenVINO's own default would run a float model in bf16)."""
from __future__ import annotations

from runtimes.engines.base import Engine, Settings, register
from runtimes.openvino_session import PRECISIONS, SUFFIXES


def _open(path: str, settings: Settings):
    from runtimes.openvino_session import OpenVinoSession
    return OpenVinoSession(path, threads=settings.threads, precision=settings.precision,
                           device=settings.device)


def _placement(path: str, settings: Settings, described: dict, feeds=None) -> dict:
    """From the compiled model's runtime graph: nothing is run, so `feeds` are not needed."""
    from runtimes.openvino_session import openvino_placement
    return openvino_placement(path, threads=settings.threads, precision=settings.precision,
                              device=settings.device)


def _flags(settings: Settings) -> list[str]:
    defaults = Settings()
    return ((["--precision", settings.precision] if settings.precision != defaults.precision
             else []) + (["--openvino-device", settings.device]
                         if settings.device != defaults.device else []))


def _add_arguments(group) -> None:
    group.add_argument("--precision", default=Settings.precision, choices=sorted(PRECISIONS),
                       help="inference precision of float layers (default f32, a true FP32 "
                       "baseline; bf16 and f16 are faster where the CPU has them)")
    group.add_argument("--openvino-device", default=Settings.device,
                       help="the device OpenVINO compiles for (CPU, GPU, NPU); exit code 3 "
                       "when it is not here")


def _preload(settings) -> None:
    import openvino  # noqa: F401


ENGINE = register(Engine(
    name="openvino", suffixes=SUFFIXES, modules=("openvino",),
    pip="openvino", open=_open, placement=_placement, flags=_flags,
    add_arguments=_add_arguments,
    settings_from=lambda args: {"precision": args.precision, "device": args.openvino_device},
    accelerated=lambda settings: True, preload=_preload))
