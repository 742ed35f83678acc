"""Where a measurement runs: this Python, another local Python, or a device over SSH.

The benchmark stage talks to a Place only: put the files there (`stage`), run one of the
runners with arguments (`run(command, args)` -> its JSON answer and wall time: `bench`
for a tensor model, `lm-bench` for a language model; `measure` -> the tensor runner's
runtimes.result.Measurement), read a file back (`read`), clean up (`close`). Which place a target gets is a registry keyed by the target's
kind (`PLACES`), like the stages: adding one is a module that registers an opener.

`device` names what a place measures on: places with the same device never measure at
the same time (every local Python shares this machine's cores, so all are `here`).
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from compress.errors import RemoteError
from compress.measure.client import measure_in_subprocess
from compress.core.registry import registrar
from runtimes.result import Measurement

HERE = "here"   # the device of every place on this machine


class DeviceLost(RemoteError):
    """The connection to a device failed (not the runner on it): a fleet retries the
    measurement on another of its devices."""


class LocalPlace:
    """This machine: the runner in a fresh subprocess of `python` (default: this one)."""
    remote, emulated, device = False, False, HERE

    def __init__(self, python: Optional[str] = None, cores: int = 1):
        self.python, self.cores = python, cores
        self.label = f"python {python}" if python else HERE

    def stage(self, files: dict[Path, str], engines, note=None) -> dict[Path, str]:
        return {path: str(path) for path in files}

    def outputs_path(self, out_dir: Path, name: str) -> str:
        return str(out_dir / name)

    def run(self, command: str, args: list[str], timeout: float,
            advance) -> tuple[dict, float]:
        """`python -m runtimes <command> <args>` in a fresh subprocess: its answer, the
        wall time."""
        started = time.perf_counter()
        answer = measure_in_subprocess([self.python or sys.executable, "-m", "runtimes",
                                        command, *args], timeout, advance)
        return answer, time.perf_counter() - started

    def measure(self, args: list[str], timeout: float, advance) -> Measurement:
        return measurement(*self.run("bench", args, timeout, advance), self.label)

    def read(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def times(self) -> Optional[dict]:
        return None

    def close(self) -> Optional[str]:
        return None


class SshPlace:
    """A device reached over SSH (compress.measure.remote.host.RemoteHost does the talking)."""
    remote = True

    def __init__(self, host):
        self.host = host
        self._held: Optional[dict] = None   # what hold() copied there
        self.label = self.device = str(host.spec.ssh.address)
        self.emulated = host.spec.emulated

    @property
    def cores(self) -> int:
        return self.host.facts["cores"]

    def stage(self, files: dict[Path, str], engines, note=print) -> dict[Path, str]:
        """Copy the runner and `files` ({local path: name there}) to the device."""
        host = self.host
        try:
            host.stage(list(files.items()), engines)
        except RemoteError as exc:
            raise DeviceLost(str(exc)) from None
        if host.swept:
            note(f"target {host.name} ({self.label}): removed {len(host.swept)} folder(s) "
                 f"that killed runs left there ({', '.join(host.swept)})")
        note(f"target {host.name}: {host.times.copied_bytes / 2**20:.1f} MiB copied to "
             f"{self.label} in {host.times.copy_s:.2f} s")
        self._held = {path: host.path(name) for path, name in files.items()}
        return dict(self._held)   # one folder on the device: hold() adds to it

    def add(self, files: dict[Path, str]) -> dict[Path, str]:
        """Copy more files into what stage() made (a fleet's board gets a model when it
        is first to measure it)."""
        try:
            self.host.add(list(files.items()))
        except RemoteError as exc:
            raise DeviceLost(str(exc)) from None
        added = {path: self.host.path(name) for path, name in files.items()}
        self._held = {**(self._held or {}), **added}
        return added

    def outputs_path(self, out_dir: Path, name: str) -> str:
        return self.host.path(name)

    def run(self, command: str, args: list[str], timeout: float,
            advance) -> tuple[dict, float]:
        """`python -m runtimes <command> <args>` on the device: its answer, the wall time;
        DeviceLost when ssh itself fails (the device, not the model)."""
        started = time.perf_counter()
        try:
            answer = measure_in_subprocess(self.host.runner_command(args, timeout, command),
                                           timeout, advance, self.host)
        except DeviceLost:
            raise
        except RemoteError as exc:   # ssh itself failed: the device, not the model
            raise DeviceLost(str(exc)) from None
        wall = time.perf_counter() - started
        self.host.times.run_s.append(wall)
        return answer, wall

    def measure(self, args: list[str], timeout: float, advance) -> Measurement:
        return measurement(*self.run("bench", args, timeout, advance), self.label)

    def hold(self, files: dict[Path, str], engines, note=print) -> dict[Path, str]:
        """`files` on the device: stage() on the first call, add() what is missing on the
        later ones (one temporary folder per device, which close() removes)."""
        if self._held is None:
            self._held = self.stage(files, engines, note)
            return self._held
        missing = {path: name for path, name in files.items() if path not in self._held}
        if missing:
            self._held.update(self.add(missing))
        return self._held

    def where(self, name: str) -> str:
        """The path on the device of what stage() copied as `name`."""
        return self.host.path(name)

    def run_json(self, command: str, args: list[str], timeout: float) -> dict:
        """`python -m runtimes <command> <args>` on the device, its JSON line."""
        return self.run(command, args, timeout, lambda **_: None)[0]

    def read(self, path: str) -> bytes:
        proc = self.host.connection.run(["cat", path], timeout=300, check=True)
        if proc.returncode != 0:
            raise RemoteError(f"target {self.host.name}: could not read {path} back: "
                              f"{proc.stderr.decode(errors='replace')[-300:]}")
        return proc.stdout

    def times(self) -> Optional[dict]:
        return {"host": self.label, **self.host.times.to_dict()}

    def close(self) -> Optional[str]:
        return self.host.close()


def measurement(answer: dict, wall_s: float, device: str) -> Measurement:
    try:
        return Measurement.from_json(answer, device, wall_s)
    except ValueError as exc:
        raise RemoteError(f"{device}: {exc}") from None


def read_local(place, path: str) -> str:
    """A file the runner wrote, as a local path (fetched into a temporary file from a
    device); the caller removes it when it is not the original."""
    if not place.remote:
        return path
    with tempfile.NamedTemporaryFile(suffix=Path(path).suffix, delete=False) as local:
        local.write(place.read(path))
    return local.name


# target kind -> opener(ctx, target spec, target name) -> a Fleet of places
PLACES: dict[str, Callable] = {}
register_place = registrar(PLACES)


def kind_of(target) -> str:
    """Which opener a pipeline target needs."""
    return "ssh" if target.remote else "python" if target.python else "local"
