"""An internal error (a bug, not the user's input) ends `compress` with exit code 3 and
one line on screen; the whole traceback goes to a crash log: in the run directory of the
run that crashed, else the system's temporary folder. Exit 1 stays "a budget is missed"
only, which is what a CI gate reads it as."""
from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

EXIT_CODE = 3
_run_dir: Path | None = None   # set while a run directory exists, for the crash log


def set_run_dir(path: Path | None) -> None:
    global _run_dir
    _run_dir = path


def write_log(exc: BaseException) -> Path:
    """Write the traceback, the command line and the versions; return the log's path."""
    folder = _run_dir if _run_dir is not None and _run_dir.is_dir() else Path(
        tempfile.gettempdir())
    path = folder / f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    try:
        from compress.runner.manifest import package_versions
        versions = package_versions()
    except Exception:  # noqa: BLE001 - the log must be written whatever else is broken
        versions = {}
    text = (f"command: {' '.join(sys.argv)}\npython: {sys.version}\nversions: {versions}\n\n"
            + "".join(traceback.format_exception(exc)))
    try:
        path.write_text(text)
    except OSError:
        path = Path(tempfile.gettempdir()) / path.name
        path.write_text(text)
    return path


def report(exc: BaseException) -> int:
    """Say it is a bug in one line, log the rest; the exit code."""
    path = write_log(exc)
    said = " ".join(str(exc).split())[:200]
    print(f"internal error (a bug in edge-compress, not in your input): "
          f"{type(exc).__name__}: {said}. The traceback is in {path}; please report it "
          "with that file.", file=sys.stderr)
    return EXIT_CODE
