"""The pipeline's SSH targets: reached and checked in preflight, closed at the end.

Checking before any compression work means an unreachable board, a refused key or a
device without onnxruntime fails in seconds, not after minutes of quantization.
"""
from __future__ import annotations

from compress.remote.host import RemoteHost, RemoteSpec
from compress.remote.ssh import SshSettings, parse_address
from compress.measuring import engine_for, required_engine


def remote_spec(target, pipeline) -> RemoteSpec:
    """A TargetSpec with `ssh:` as a RemoteSpec; key files relative to the pipeline."""
    resolve = (lambda path: pipeline.resolve(path) if path else None)
    settings = SshSettings(parse_address(target.ssh), identity=resolve(target.identity),
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


def _engines_needed(runtime, formats: set[str]) -> tuple[str, ...]:
    """The engines a device must have to measure `formats` for a profile (with `auto`,
    the default engine of each format; the runner probes whatever else is there)."""
    return tuple(sorted({required_engine(name, fmt) for fmt in formats
                         if (name := engine_for(runtime, fmt))}))


def open_hosts(ctx) -> dict[str, RemoteHost]:
    """Probe every SSH target of a pipeline that benchmarks; {target name: RemoteHost}."""
    pipeline = ctx.pipeline
    if not any(stage.type == "benchmark" for stage in pipeline.stages):
        return {}
    formats = formats_made(pipeline)
    hosts: dict[str, RemoteHost] = {}
    try:
        for target, (name, profile) in zip(pipeline.targets, ctx.targets):
            if not target.ssh:
                continue
            engines = _engines_needed(profile.runtime, formats)
            host = RemoteHost(name, remote_spec(target, pipeline))
            hosts[name] = host
            ctx.progress.note(f"target {name}: connecting to {host.spec.ssh.address}")
            facts = host.probe(engines)
            ctx.progress.note(f"target {name}: {facts['arch']}, Python "
                              f"{'.'.join(map(str, facts['python']))}, {facts['cores']} cores, "
                              f"{', '.join(engines) or 'no runtime needed'} present "
                              f"({host.times.connect_s:.2f} s)")
    except BaseException:
        close_hosts(hosts)
        raise
    return hosts


def close_hosts(hosts: dict[str, RemoteHost]) -> list[str]:
    """Remove what the run put on each device; warnings for what could not be removed."""
    return [warning for host in hosts.values() if (warning := host.close())]
