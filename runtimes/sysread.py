"""Read sysfs files and run small host commands, tolerating their absence.

Every path is given as on a real host ("/sys/class/...") and resolved under `root`, so a
fixture tree (or an emulator's tree) can stand in for the real one. The CLI takes that
root from the environment variable EDGE_COMPRESS_SYSFS_ROOT, which exists for tests and
emulators; on a device it is unset and the root is "/". Commands are looked up on PATH.
"""
from __future__ import annotations

import glob as _glob
import os
import shutil
import subprocess

SYSFS_ROOT_ENV = "EDGE_COMPRESS_SYSFS_ROOT"


def sysfs_root() -> str:
    return os.environ.get(SYSFS_ROOT_ENV) or "/"


def under(root: str, path: str) -> str:
    """`path` (absolute, as on a host) inside `root`."""
    return os.path.join(root, path.lstrip("/"))


def host_path(root: str, path: str) -> str:
    """The inverse of `under`: how a path found inside `root` reads on a host."""
    rel = os.path.relpath(path, root)
    return "/" + rel if not rel.startswith("..") else path


def paths(root: str, pattern: str) -> list[str]:
    """Sorted matches of a host glob pattern inside `root`."""
    return sorted(_glob.glob(under(root, pattern)))


def read_text(path: str) -> str | None:
    """The stripped content of a file, or None when it is missing or unreadable."""
    try:
        with open(path, "rb") as fh:
            return fh.read().decode(errors="replace").strip()
    except OSError:
        return None


def read_number(path: str) -> float | None:
    text = read_text(path)
    try:
        return float(text) if text else None
    except ValueError:
        return None


def read_int(path: str) -> int | None:
    value = read_number(path)
    return int(value) if value is not None else None


def run_command(argv: list[str], timeout: float = 5.0) -> str | None:
    """stdout of a command found on PATH, or None when it is absent, fails or hangs."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None
