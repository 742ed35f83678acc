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
import shlex
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from compress.errors import RemoteError
from compress.remote.ssh import SshConnection, SshSettings

RUNNER_PACKAGE = Path(__file__).resolve().parents[2] / "runtimes"

# module alternatives per need, and the pip name that provides each
_NEEDS = {"numpy": ("numpy",), "onnxruntime": ("onnxruntime",),
          "litert": ("ai_edge_litert", "tflite_runtime")}
_PIP_NAME = {"numpy": "numpy", "onnxruntime": "onnxruntime", "litert": "ai-edge-litert"}
MIN_PYTHON = (3, 10)
DISK_MARGIN_BYTES = 32 * 2**20

# Runs on the device with its own Python, stdlib only: facts, missing modules, free disk,
# and (asked to, and only when everything is there) the temporary directory.
_PROBE = r"""
import importlib.util, json, os, platform, shutil, sys, tempfile
ask = json.loads(sys.argv[1])
missing = [need for need, modules in ask["needs"].items()
           if not any(importlib.util.find_spec(m) for m in modules)]
try:
    free = shutil.disk_usage(ask["workdir"]).free
except OSError:
    free = None
out = {"python": list(sys.version_info[:3]), "executable": sys.executable,
       "arch": platform.machine(), "cores": os.cpu_count(), "missing": missing,
       "free_bytes": free, "dir": None}
if ask["create"] and not missing and free is not None and free >= ask["bytes"]:
    out["dir"] = tempfile.mkdtemp(prefix="edge-compress-", dir=ask["workdir"])
print(json.dumps(out))
"""


@dataclass(frozen=True)
class RemoteSpec:
    """What a pipeline target says about its host (see compress.config.TargetSpec)."""
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

    def _missing_message(self, missing: list[str]) -> str:
        py = self.facts.get("executable") or self.spec.python
        packages = " ".join(_PIP_NAME[need] for need in missing)
        return (f"target {self.name} ({self.spec.ssh.address}): {py} there cannot import "
                f"{', '.join(missing)}. Install it on the device: {py} -m pip install "
                f"{packages}   (or the whole device extra: {py} -m pip install "
                f"\"edge-compress[device]\"; on Raspberry Pi OS inside a venv, then point "
                f"`python:` of the target at the venv's python)")

    def _probe(self, engines: tuple[str, ...], create: bool, size: int) -> dict:
        ask = {"needs": {need: _NEEDS[need] for need in ("numpy", *engines)},
               "workdir": self.spec.workdir, "create": create, "bytes": size}
        proc = self.connection.run([self.spec.python, "-c", _PROBE, json.dumps(ask)], timeout=
                                   self.spec.ssh.connect_timeout_s + 60)
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
        facts = self._probe(engines, create=False, size=0)
        self.times.connect_s = time.perf_counter() - start
        return facts

    def stage(self, files: list[tuple[Path, str]], engines: tuple[str, ...]) -> None:
        """Make the temporary directory and copy the runner and `files` (local, name) there."""
        payload = _pack(_runner_files() + files)
        facts = self._probe(engines, create=True, size=len(payload) + DISK_MARGIN_BYTES)
        self.directory = facts["dir"]
        start = time.perf_counter()
        self._upload(payload)
        self.times.copy_s = time.perf_counter() - start
        self.times.copied_bytes = len(payload)

    def _upload(self, payload: bytes) -> None:
        cmd = self.connection.command(["tar", "-C", self.directory, "-xf", "-"])
        try:
            proc = subprocess.run(cmd, input=payload, capture_output=True, timeout=600)
        except subprocess.TimeoutExpired:
            raise RemoteError(f"target {self.name}: copying to {self.spec.ssh.address} did "
                              "not finish within 600 s") from None
        err = proc.stderr.decode(errors="replace")
        if proc.returncode == 255:
            raise RemoteError(self.connection.explain(err))
        if proc.returncode != 0:
            if "No space left" in err:
                raise RemoteError(f"target {self.name}: {self.spec.ssh.address} ran out of "
                                  f"disk in {self.spec.workdir} while copying; free some space "
                                  "or set `workdir:` to a folder on a bigger disk")
            raise RemoteError(f"target {self.name}: copying to {self.spec.ssh.address} "
                              f"failed: {err[-400:]}")

    def path(self, name: str) -> str:
        return str(PurePosixPath(self.directory) / name)

    def runner_command(self, runner_args: list[str], timeout_s: float) -> list[str]:
        """Local argv running `python -m runtimes bench <runner_args>` in the directory.
        `timeout` on the device stops the runner there even if this side goes away."""
        remote = ["env", f"PYTHONPATH={self.path('runner')}", "timeout", "-k", "5",
                  str(int(timeout_s)), self.spec.python, "-m", "runtimes", "bench",
                  *runner_args]
        shell = " ".join(shlex.quote(arg) for arg in remote)
        return self.connection.command(f"cd {shlex.quote(self.directory)} && exec {shell}")

    def close(self) -> str | None:
        """Remove the temporary directory and end the connection. Returns a warning when
        the directory could not be removed (the device went away), else None."""
        if self.closed:
            return None
        self.closed = True
        warning = None
        if self.directory:
            start = time.perf_counter()
            try:
                proc = self.connection.run(["rm", "-rf", "--", self.directory], timeout=60,
                                           check=False)
                if proc.returncode != 0:
                    warning = (f"could not remove {self.directory} on {self.spec.ssh.address}: "
                               f"{proc.stderr.decode(errors='replace')[-200:]}")
            except RemoteError as exc:
                warning = f"could not remove {self.directory} on {self.spec.ssh.address}: {exc}"
            self.times.cleanup_s = time.perf_counter() - start
            self.directory = None
        self.connection.close()
        return warning
