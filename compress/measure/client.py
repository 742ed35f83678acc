"""The measuring client: how the pipeline runs `python -m runtimes bench` and reads its
answer, here (a fresh subprocess, this checkout's runtimes/ importable), in another
local Python, or on a device over SSH (the command given is then that host's ssh
command); and which engine measures an artifact for a profile.

The runner's exit codes: 0 a result (JSON, the last line of stdout), 2 the runner's own
clear error (ModelError here), 3 the accelerator asked for is not on the measuring
machine (Unavailable: the report says "unmeasured", never a number), 4 the engine cannot
open this model where another may (EngineLeftOut: the engine is left out for it, with
the reason); ended by a signal (the out-of-memory killer's SIGKILL, a crash), here or on
a device: RunnerDied, recorded as the variant failed on that target (exits.py).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import threading
from pathlib import Path

from compress.errors import ModelError, RemoteError
# Unavailable: preflight and the language-model runs catch it as this client's
from compress.measure.exits import EngineLeftOut, Unavailable, reap, runner_died
from runtimes import engines

PROJECT_ROOT = Path(__file__).resolve().parents[2]
AUTO = "auto"   # runtime.engines: auto: the runner probes the installed engines


def engine_for(runtime, fmt: str) -> str | None:
    """The engine that measures an artifact of format `fmt` for a profile's `runtime`: the
    first of its `engines` that runs the format, AUTO when it lets the runner choose
    among the engines that do, None when none does."""
    runs = [engine.name for engine in engines.for_format(fmt)]
    if runtime.auto:
        return AUTO if runs else None
    return next((name for name in runtime.engines if name in runs), None)


def baseline_engines(runtime, fmt: str) -> tuple[str | None, tuple[str, ...]]:
    """The engines that measure the FP32 baseline of format `fmt` for a profile: the one
    whose record is the target's baseline (with AUTO the format's default engine, never a
    probe's choice, so the reference is the same on every machine), and the others it is
    also measured on so that each engine's variants have an FP32 run on that engine to
    be compared with (every engine that runs `fmt`: the listed ones, or with AUTO all)."""
    runs = [engine.name for engine in engines.for_format(fmt)]
    primary = engine_for(runtime, fmt)
    if primary is None:
        return None, ()
    primary = required_engine(primary, fmt)
    others = runs if runtime.auto else [name for name in runtime.engines if name in runs]
    return primary, tuple(name for name in others if name != primary)


def engine_flags(engine: str, settings: engines.Settings, fmt: str) -> list[str]:
    """The runner's flags for `engine` (AUTO: for every engine that may be chosen) with
    `settings`."""
    chosen = engines.for_format(fmt) if engine == AUTO else (engines.get(engine),)
    return ["--engine", engine] + [flag for e in chosen for flag in e.flags(settings)]


def device_flags(profile) -> tuple[str, ...]:
    """The runner's power-meter and pinning options for a profile."""
    power, defaults = profile.power, type(profile.power)()
    flags = []  # only what differs from the runner's own defaults (meter auto, idle 1 s)
    for option, key in (("--meter", "meter"), ("--idle-seconds", "idle_seconds"),
                        ("--meter-command", "command"), ("--meter-rail", "rail"),
                        ("--meter-interval-ms", "interval_ms")):
        value = getattr(power, key)
        flags += [option, f"{value:g}" if isinstance(value, float) else str(value)] \
            if value != getattr(defaults, key) else []
    if profile.runtime.cpu_affinity:
        flags += ["--cpus", ",".join(map(str, profile.runtime.cpu_affinity))]
    return tuple(flags)


def min_metric_flag(engine: str, max_drop: float | None, metric: dict) -> list[str]:
    """With engine auto and an accuracy budget, the least metric the runner's chosen engine
    must reach (the source's metric less the drop allowed), so that the engine is chosen
    by the budget, not by speed alone (runtimes/bench/auto.py)."""
    if engine != AUTO or max_drop is None or metric.get("custom"):
        return []
    return ["--min-metric", f"{metric['baseline'] - max_drop:.6g}"]


def required_engine(engine: str, fmt: str) -> str:
    """The engine a measuring machine must have to measure `fmt` with `engine`: itself, or
    for AUTO the format's default engine, which the runner's probe always has to choose."""
    return engines.for_format(fmt)[0].name if engine == AUTO else engine


def needed_engines(jobs) -> tuple[str, ...]:
    """The engines a measuring machine must have for `jobs`."""
    return tuple(sorted({required_engine(job.engine, job.artifact.format) for job in jobs}))


def reports_placement(engine: str, settings: engines.Settings) -> bool:
    """Where each op ran is worth reporting: an accelerator (XNNPACK included); with AUTO
    the runner asks for it and keeps it where the engine it chose is one."""
    return engine == AUTO or engines.get(engine).accelerated(settings)


def _left_out_or_unavailable(status: int, said: str) -> None:
    if status == 4:
        raise EngineLeftOut(_runner_error(said))
    if status == 3:
        raise Unavailable(_runner_error(said))


def _runner_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    return (lines[-1] if lines else stderr).removeprefix("error: ")


def _follow_progress(stream, advance, lines: list[str]) -> None:
    for line in stream:
        if line.startswith("@progress"):
            advance(completed=int(line.split()[1]))
        else:
            lines.append(line)


def runner_env() -> dict:
    """The environment a local runner starts in: this checkout's runtimes/ importable."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def measure_in_subprocess(cmd: list, timeout: float, advance, host=None) -> dict:
    """Run the runner (here, or on `host` when `cmd` is that host's ssh command) and
    return its JSON; its '@progress' lines move the progress bar. A runner ended by a
    signal raises RunnerDied (exits.py), here and on a device alike."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.PIPE, text=True, env=runner_env())
        stderr_lines: list[str] = []
        # stderr is read beside, so the timeout holds even when the runner hangs
        reader = threading.Thread(target=_follow_progress, daemon=True,
                                  args=(proc.stderr, advance, stderr_lines))
        reader.start()
        try:
            peak = reap(proc, timeout)   # ssh's own, for a device: not the runner's
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise ModelError(f"the benchmark did not finish within {timeout:.0f} s; raise "
                             "benchmark.timeout_s or lower runs/min_seconds") from None
        reader.join(timeout=10)
        out.seek(0)
        stdout = out.read()
    stderr = "".join(stderr_lines).strip()
    if host is not None:
        _raise_for_remote_status(proc.returncode, stderr, host, timeout)
    else:
        _raise_for_local_status(proc.returncode, stderr, peak)
    return _answer(stdout, host)


def _raise_for_local_status(returncode: int, stderr: str, peak: float | None) -> None:
    died = runner_died(returncode, peak)
    if died is not None:
        raise died
    if returncode in (3, 4):
        _left_out_or_unavailable(returncode, stderr)
    elif returncode == 2:
        raise ModelError(stderr.removeprefix("error: "))
    elif returncode != 0:
        raise RuntimeError(f"benchmark subprocess failed ({returncode}): {stderr[-3000:]}")


def _answer(stdout: str, host) -> dict:
    """The runner's JSON: the last line of its output (a device's shell start-up may
    print before the runner does)."""
    lines = stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        where = f"target {host.name}: " if host is not None else ""
        said = lines[-1][-300:] if lines else "nothing"
        raise ModelError(f"{where}the runner ended without its result (its last output: "
                         f"{said!r}); run `python -m runtimes bench` by hand to see why") \
            from None


def _raise_for_remote_status(returncode: int, stderr: str, host, timeout: float) -> None:
    """What the device's runner said ('@exit N' from its shell), or ssh's own failure."""
    where = f"target {host.name} ({host.spec.ssh.address})"
    exits = re.findall(r"^@exit (\d+)$", stderr, flags=re.M)
    if not exits:  # the shell never reported: ssh itself failed
        if returncode != 0:
            raise RemoteError(f"{where}: {host.connection.explain(stderr)}")
        return
    status = int(exits[-1])
    said = "\n".join(line for line in stderr.splitlines() if not line.startswith("@exit"))
    if status == 124:
        raise ModelError(f"{where}: the benchmark did not finish within {timeout:.0f} s on "
                         "the device; raise benchmark.timeout_s or lower runs/min_seconds")
    died = runner_died(status, where=f"{where}: ", remote=True)   # 128 + the signal
    if died is not None:
        raise died
    # 3: the accelerator asked for is not on that device; 4: its engine cannot open this
    _left_out_or_unavailable(status, said)
    if status == 2:  # the runner's own clear error (e.g. a named meter absent there)
        raise ModelError(f"{where}: {_runner_error(said)}")
    if status != 0:
        raise ModelError(f"{where}: the runner failed there (exit {status}): {said[-1500:]}")


