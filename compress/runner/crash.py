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

from compress.core.safe_files import create_new

EXIT_CODE = 3
_run_dir: Path | None = None   # set while a run directory exists, for the crash log


def set_run_dir(path: Path | None) -> None:
    global _run_dir
    _run_dir = path


def write_log(exc: BaseException) -> Path | None:
    """Write the traceback, the command line and the versions; return the log's path
    (None where no disk takes it). A new file, never over another nor through a link (a
    run folder and the temporary folder are others' to write too)."""
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
        create_new(path, text)
        return path
    except Exception:  # noqa: BLE001 - a full disk, a name taken: the temporary folder
        return _temporary_log(path.stem, text)


def _temporary_log(stem: str, text: str) -> Path | None:
    try:
        fd, name = tempfile.mkstemp(prefix=f"{stem}-", suffix=".log")   # a new name, made here
    except OSError:
        return None
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        return Path(name)
    except OSError:
        Path(name).unlink(missing_ok=True)
        return None


def report(exc: BaseException) -> int:
    """Say it is a bug in one line, log the rest; the exit code."""
    path = write_log(exc)
    from runtimes.safe_text import safe_text   # the exception may quote user data
    said = safe_text(" ".join(str(exc).split())[:200], multiline=False)
    where = (f"The traceback is in {path}; please report it with that file." if path else
             "The traceback could not be written (no disk took it); please report this "
             "line.")
    print(f"internal error (a bug in edge-compress, not in your input): "
          f"{type(exc).__name__}: {said}. {where}", file=sys.stderr)
    return EXIT_CODE
