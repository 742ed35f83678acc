"""The pipeline's SSH targets as the remote layer sees them: each device's settings, and
the engines a device must have (checked when it is probed, in preflight).

Checking before any compression work means an unreachable board, a refused key or a
device without onnxruntime fails in seconds, not after minutes of quantization
(compress.measure.fleet opens them).
"""
from __future__ import annotations

from compress.measure.remote.host import RemoteSpec
from compress.measure.remote.ssh import SshSettings, parse_address
from compress.measure.client import engine_for, required_engine


def remote_spec(target, pipeline, address: str) -> RemoteSpec:
    """One device of a TargetSpec as a RemoteSpec; key files relative to the pipeline."""
    resolve = (lambda path: pipeline.resolve(path) if path else None)
    settings = SshSettings(parse_address(address), identity=resolve(target.identity),
                           known_hosts=resolve(target.known_hosts),
                           accept_new_host_key=target.accept_new_host_key,
                           connect_timeout_s=target.connect_timeout_s)
    return RemoteSpec(settings, python=target.python or "python3", workdir=target.workdir,
                      emulated=target.emulated)


def formats_made(pipeline) -> set[str]:
    """The model formats this pipeline will benchmark (which runtimes a device needs)."""
    formats = set()
    if pipeline.model.tflite:
        formats.add("tflite")
    else:
        formats.add("onnx")  # the source model, and the FP32 baseline made from it
    if any(stage.type == "export.tflite" for stage in pipeline.stages):
        formats.add("tflite")
    return formats


def engines_for_target(pipeline, profile) -> tuple[str, ...]:
    """The engines a device must have to measure what `pipeline` makes for a profile
    (with `auto`, the default engine of each format; the runner probes what else is there)."""
    return tuple(sorted({required_engine(name, fmt) for fmt in formats_made(pipeline)
                         if (name := engine_for(profile.runtime, fmt))}))
