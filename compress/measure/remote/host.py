"""A benchmark target reached over SSH: check it, stage the files, run the runner, clean up.

What travels to the device, into one temporary directory made there:
  runner/runtimes/   this project's own runner, so the device measures with exactly the
                     code of the pipeline that asks (it only needs numpy and a runtime)
  models/            the artifacts measured on this target
  inputs/            the timed batch and the evaluation set
The directory is removed when the benchmark ends, also after a failure; the device keeps
nothing. Times of each step (connect, copy, every run) are recorded for the report.
"""
from __future__ import annotations

import io
import json
import math
import os
import shlex
import subprocess
import tarfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from compress.errors import RemoteError
from compress.measure.remote.scripts import HOLD, PROBE
from compress.measure.remote.ssh import SshConnection, SshSettings
from runtimes import engines
from runtimes.lm.engines import all_engines as lm_engines

RUNNER_PACKAGE = Path(__file__).resolve().parents[3] / "runtimes"

# module alternatives per need, and the pip name that provides each: numpy, every
# engine's own (runtimes.engines) and the language-model engines' (runtimes.lm.engines)
_NEEDS = {"numpy": ("numpy",), **{e: engines.get(e).modules for e in engines.names()},
          **{e.name: e.modules for e in lm_engines()}}
_PIP_NAME = {"numpy": "numpy", **{e: engines.get(e).pip for e in engines.names()},
             **{e.name: e.packages[0] for e in lm_engines()}}
MIN_PYTHON = (3, 10)
# A killed run's folder on the device is removed by the next run once it is this old
# (seconds; a live run locks its folder within seconds of making it). Tests shorten it.
STALE_ENV = "EDGE_COMPRESS_REMOTE_STALE_S"
DISK_MARGIN_BYTES = 32 * 2**20


@dataclass(frozen=True)
class RemoteSpec:
    """What a pipeline target says about its host (see compress.config.pipeline.TargetSpec)."""
    ssh: SshSettings
    python: str = "python3"
    workdir: str = "/tmp"
    emulated: bool = False


@dataclass
class RemoteTimes:
    connect_s: float = 0.0
    copy_s: float = 0.0
    copied_bytes: int = 0
    run_s: list[float] = field(default_factory=list)
    cleanup_s: float = 0.0

    def to_dict(self) -> dict:
        return {"connect_s": self.connect_s, "copy_s": self.copy_s,
                "copied_bytes": self.copied_bytes, "runs": len(self.run_s),
                "run_s_median": sorted(self.run_s)[len(self.run_s) // 2] if self.run_s else None,
                "cleanup_s": self.cleanup_s}


def _runner_files() -> list[tuple[Path, str]]:
    return [(path, f"runner/runtimes/{path.relative_to(RUNNER_PACKAGE).as_posix()}")
            for path in sorted(RUNNER_PACKAGE.rglob("*.py"))]


def _pack(files: list[tuple[Path, str]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for local, name in files:
            tar.add(str(local), arcname=name, recursive=False)
    return buffer.getvalue()


class RemoteHost:
    """One device: `probe()` in preflight, then `stage()`, `runner_command()`, `close()`."""

    def __init__(self, name: str, spec: RemoteSpec):
        self.name, self.spec = name, spec
        self.connection = SshConnection(spec.ssh)
        self.times = RemoteTimes()
        self.facts: dict = {}
        self.directory: str | None = None
        self.closed = False
        self.swept: list[str] = []    # folders of killed runs removed on the device
        self._holder = None           # the ssh session holding the folder's lock

    def _missing_message(self, missing: list[str]) -> str:
        py = self.facts.get("executable") or self.spec.python
        packages = " ".join(_PIP_NAME[need] for need in missing)
        return (f"target {self.name} ({self.spec.ssh.address}): {py} there cannot import "
                f"{', '.join(missing)}. Install it on the device: {py} -m pip install "
                f"{packages}   (on Raspberry Pi OS inside a venv, e.g. python3 -m venv "
                f"~/edge && ~/edge/bin/pip install {packages}, then point `python:` of the "
                "target at ~/edge/bin/python)")

    def _python(self) -> str:
        """The interpreter for the device's shell; a leading ~/ expands there."""
        python = self.spec.python
        if python.startswith("~/"):
            return '"$HOME"/' + shlex.quote(python[2:])
        return shlex.quote(python)

    def _probe(self, engines: tuple[str, ...], create: str | None, size: int) -> dict:
        ask = {"needs": {need: _NEEDS[need] for need in ("numpy", *engines)},
               "workdir": self.spec.workdir, "create": create, "bytes": size,
               "stale_s": float(os.environ.get(STALE_ENV, 60))}
        line = f"{self._python()} -c {shlex.quote(PROBE)} {shlex.quote(json.dumps(ask))}"
        proc = self.connection.run(line, timeout=self.spec.ssh.connect_timeout_s + 60)
        if proc.returncode == 127:
            raise RemoteError(f"target {self.name}: '{self.spec.python}' is not on "
                              f"{self.spec.ssh.address}. Install Python 3 there, or set "
                              "`python:` on the target to its interpreter's path")
        try:
            facts = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RemoteError(f"target {self.name}: {self.spec.python} on "
                              f"{self.spec.ssh.address} did not run the probe: "
                              f"{proc.stderr.decode(errors='replace')[-400:]}") from None
        self.facts = facts
        if tuple(facts["python"][:2]) < MIN_PYTHON:
            raise RemoteError(f"target {self.name}: the runner needs Python "
                              f"{'.'.join(map(str, MIN_PYTHON))}+, {self.spec.python} there is "
                              f"{'.'.join(map(str, facts['python']))}; set `python:` to a newer one")
        if facts["missing"]:
            raise RemoteError(self._missing_message(facts["missing"]))
        if facts["missing_tools"]:
            raise RemoteError(f"target {self.name}: {self.spec.ssh.address} lacks "
                              f"{', '.join(facts['missing_tools'])} (coreutils/tar); install "
                              "them there")
        if facts["free_bytes"] is None:
            raise RemoteError(f"target {self.name}: workdir {self.spec.workdir} does not "
                              f"exist on {self.spec.ssh.address}; set `workdir:` to a folder there")
        if facts["free_bytes"] < size:
            raise RemoteError(f"target {self.name}: {self.spec.ssh.address} has "
                              f"{facts['free_bytes'] / 2**20:.0f} MiB free in {self.spec.workdir}, "
                              f"the benchmark needs {size / 2**20:.0f} MiB. Free some space "
                              "or set `workdir:` to a folder on a bigger disk")
        return facts

    def probe(self, engines: tuple[str, ...]) -> dict:
        """Reachable, host key right, Python and the runtimes there: before any work."""
        start = time.perf_counter()
        self.connection.open()
        facts = self._probe(engines, create=None, size=0)
        self.times.connect_s = time.perf_counter() - start
        return facts

    def stage(self, files: list[tuple[Path, str]], engines: tuple[str, ...]) -> None:
        """Make the temporary directory and copy the runner and `files` (local, name) there."""
        payload = _pack(_runner_files() + files)
        self.connection.open()  # again: compression may have outlasted the first connection
        name = f"edge-compress-{uuid.uuid4().hex[:12]}"
        # Known before it exists: close() removes it even if the probe's answer is lost.
        self.directory = str(PurePosixPath(self.facts["workdir"]) / name)
        facts = self._probe(engines, create=name, size=len(payload) + DISK_MARGIN_BYTES)
        self.swept = facts.get("swept") or []
        self._hold_directory()
        self._timed_upload(payload)

    def add(self, files: list[tuple[Path, str]]) -> None:
        """Copy more files (local, name) into the directory stage() made."""
        self._timed_upload(_pack(files))

    def _timed_upload(self, payload: bytes) -> None:
        start = time.perf_counter()
        self._upload(payload)
        self.times.copy_s += time.perf_counter() - start
        self.times.copied_bytes += len(payload)

    def _hold_directory(self) -> None:
        """Lock the folder for this run's life (see scripts.HOLD and the probe's sweep)."""
        line = f"{self._python()} -c {shlex.quote(HOLD)} {shlex.quote(self.directory)}"
        self._holder = subprocess.Popen(self.connection.command(line), stdin=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _release_directory(self) -> None:
        holder, self._holder = self._holder, None
        if holder is None:
            return
        holder.stdin.close()
        try:
            holder.wait(timeout=15)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()

    def _upload(self, payload: bytes) -> None:
        # at least 1 MiB/s, whatever the link: a stalled copy fails instead of hanging
        timeout = 120 + len(payload) / 2**20
        proc = self.connection.run(["tar", "-C", self.directory, "-xf", "-"], stdin=payload,
                                   timeout=timeout)
        err = proc.stderr.decode(errors="replace")
        if proc.returncode != 0:
            if "No space left" in err:
                raise RemoteError(f"target {self.name}: {self.spec.ssh.address} ran out of "
                                  f"disk in {self.spec.workdir} while copying; free some space "
                                  "or set `workdir:` to a folder on a bigger disk")
            raise RemoteError(f"target {self.name}: copying to {self.spec.ssh.address} "
                              f"failed: {err[-400:]}")

    def path(self, name: str) -> str:
        return str(PurePosixPath(self.directory) / name)

    def runner_command(self, runner_args: list[str], timeout_s: float,
                       command: str = "bench") -> list[str]:
        """Local argv running `python -m runtimes <command> <runner_args>` in the directory
        (`bench`: a tensor model; `lm-bench`: a language model).

        `timeout` on the device stops the runner there even if this side goes away; it
        leads its own process group, whose id is kept in .pid so close() can stop a
        runner this side abandoned (Ctrl-C, a local timeout). The shell reports the
        runner's exit status on stderr ('@exit N'), because ssh itself answers 255 for a
        command killed by a signal (out of memory), as for a connection failure.
        """
        runner = [self.facts["executable"], "-m", "runtimes", command, *runner_args]
        quoted = " ".join(shlex.quote(arg) for arg in runner)
        folder = shlex.quote(self.directory)
        # In a session of its own (setsid), the runner's first process writes its pid,
        # which is then its process group's: close() and the next run's sweep stop the
        # whole group by it. `setsid -w` waits and passes the exit status on.
        inner = (f"echo $$ > {folder}/.pid; exec timeout -k 5 {math.ceil(timeout_s)} "
                 f"{quoted}")
        line = (f"cd {folder} && (PYTHONPATH={shlex.quote(self.path('runner'))}"
                f"${{PYTHONPATH:+:$PYTHONPATH}} exec setsid -w sh -c {shlex.quote(inner)}) "
                f"</dev/null & wait $!; rc=$?; echo \"@exit $rc\" >&2; exit $rc")
        return self.connection.command(line)

    def close(self) -> str | None:
        """Remove the temporary directory and end the connection. Returns a warning when
        the directory could not be removed (the device went away), else None."""
        if self.closed:
            return None
        self.closed = True
        warning = None
        self._release_directory()
        if self.directory:
            start = time.perf_counter()
            folder = shlex.quote(self.directory)
            # Stop a runner still going there (abandoned by this side), then remove it all.
            line = (f"test -f {folder}/.pid && kill -TERM -- -$(cat {folder}/.pid) "
                    f"2>/dev/null; rm -rf -- {folder}")
            try:
                proc = self.connection.run(line, timeout=60, check=False)
                if proc.returncode != 0:
                    warning = (f"could not remove {self.directory} on {self.spec.ssh.address}: "
                               f"{proc.stderr.decode(errors='replace')[-200:]}")
            except RemoteError as exc:
                warning = f"could not remove {self.directory} on {self.spec.ssh.address}: {exc}"
            finally:
                self.times.cleanup_s = time.perf_counter() - start
                self.directory = None
                self.connection.close()
            return warning
        self.connection.close()
        return warning
