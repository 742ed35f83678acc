"""The errors a user can cause and fix.

    CompressError                 bad input or an environment the user can fix (exit 2)
    ├── ConfigError               pipeline.yaml / a profile / a Pipeline built in Python:
    │                             file, line and field; the stage graph
    ├── DataError                 data that is missing or does not fit the model (the feed,
    │                             the input, both shapes), a metric function that fails
    ├── ModelError                a model that cannot be loaded, run, exported or quantized
    │                             (the op and opset where onnxruntime names them); a
    │                             library failing inside itself on the model (onnxruntime,
    │                             LiteRT, ai-edge-quantizer, OpenVINO: the library, its
    │                             version, the node, what to try): core/library_errors.py
    ├── StageError                stage N failed: "stage N (type): <its cause>", raised from
    │                             the cause (itself one of these)
    ├── MissingDependency         an optional package is not installed: the pip command
    ├── NoSpace                   the disk (or quota) is full where a run writes (ENOSPC,
    │                             EDQUOT, or a library's error about the file it could not
    │                             finish): the disk, what is free, about how much more
    │                             was needed; the CLI and compress.run turn such an
    │                             OSError into it
    └── RemoteError               an SSH target cannot be reached or answers oddly

A link or something else than expected where a run writes inside its folder is a
ConfigError too (compress/core/safe_files.py: InTheWay).

runtimes/ (torch-free, below this layer) raises its own RuntimeInputError; the pipeline
turns it into one of these where it calls the runtimes.

The CLI catches `CompressError` (and a full disk, as NoSpace) only: it prints the message (one paragraph, no
traceback) and exits 2. Every other exception is a bug: exit 3, one line, its traceback
in a crash log (compress/runner/crash.py). Where the pipeline hands the user's model to
a third-party library, `blame_library` turns an exception raised inside that library
into a ModelError; one raised in our own code stays a bug.
"""
from __future__ import annotations

import errno
import os
import re

from runtimes.safe_text import safe_text

# terminal colour and cursor codes that libraries (torch's exporter, rich) put in their
# messages: printed again inside ours they garble a log file or a CI page
_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _printable(arg):
    """A message as it may be printed: a library's colour codes dropped; what else drives
    a terminal (an OSC title sequence in a file name, a profile field, an op type) shown
    escaped, and a URL's password masked (runtimes/safe_text.py)."""
    return safe_text(_TERMINAL_CODES.sub("", arg)) if isinstance(arg, str) else arg


class CompressError(Exception):
    """Bad input or an environment problem the user can fix."""

    exit_code = 2

    def __init__(self, *args):
        # every message is built from user data: made safe here, once, for every subclass
        super().__init__(*(_printable(a) for a in args))


class ConfigError(CompressError):
    """pipeline.yaml (or a profile) does not describe a valid pipeline."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None):
        self.file, self.line, self.field = file, line, field
        where = file or ""
        if file and line:
            where = f"{file}:{line}"
        prefix = f"{where}: " if where else ""
        if field:
            prefix += f"{field}: "
        super().__init__(prefix + message)


class DataError(CompressError):
    """Calibration, evaluation or training data is missing or does not fit the model."""


class ModelError(CompressError):
    """The model cannot be loaded, or does not match what the pipeline declares."""


class StageError(CompressError):
    """A stage failed for a reason the user can act on."""

    def __init__(self, index: int, stage_type: str, message: str):
        self.index, self.stage_type = index, stage_type
        super().__init__(f"stage {index} ({stage_type}): {message}")


class MissingDependency(CompressError):
    """An optional package a stage needs is not installed."""

    def __init__(self, module: str, pip_name: str, purpose: str):
        self.module, self.pip_name = module, pip_name
        super().__init__(
            f"{purpose} needs the Python package '{pip_name}' (module '{module}'), which is "
            f"not installed. Fix: pip install -c constraints.txt {pip_name}")


class RemoteError(CompressError):
    """A benchmark target could not be reached or did not answer sensibly."""


# the errors of a full disk: no block left, or the user's quota spent
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size < 10e6 else f"{size / 1e6:.0f} MB"


def _disk_of(folder) -> tuple[str, int | None]:
    """The mount point under `folder` (its nearest existing ancestor) and its free bytes."""
    path = os.path.abspath(folder)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        device, disk = os.stat(path).st_dev, os.statvfs(path)
        while os.path.dirname(path) != path and \
                os.stat(os.path.dirname(path)).st_dev == device:
            path = os.path.dirname(path)
        return path, disk.f_bavail * disk.f_frsize
    except OSError:
        return path, None


class NoSpace(CompressError):
    """The disk (or the user's quota) is full where compress writes."""

    def __init__(self, folder=None, needed: int | None = None, quota: bool = False,
                 during: str = ""):
        """`folder`: where the write failed (None: not known, the standard output);
        `needed`: the size being written; `during`: the error it surfaced as."""
        self.folder, self.needed = folder, needed
        where = "the disk being written"
        if folder is not None:
            mount, free = _disk_of(folder)
            left = f", {_megabytes(free)} free" if free is not None else ""
            where = f"the disk of {folder} (mounted at {mount}{left})"
        what = "disk quota exceeded" if quota else "no space left"
        need = f", needed about {_megabytes(needed)}" if needed else ""
        cause = f" (it surfaced as {during})" if during else ""
        super().__init__(f"{what} on {where}{need}{cause}. Free some space there, or give "
                         "`output:` (or --output) a folder on a disk with room, and run again")

    @classmethod
    def found_in(cls, exc: BaseException, folder=None,
                 needed: int | None = None) -> "NoSpace | None":
        """A NoSpace for an exception that is a full disk (an OSError ENOSPC or EDQUOT),
        or was raised from one (a library's error about the file it could not finish);
        None for any other, and for an error of ours that already says it."""
        seen, top = set(), exc
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            if isinstance(exc, NoSpace):
                return exc if exc is top or not isinstance(top, CompressError) else None
            if isinstance(exc, OSError) and exc.errno in FULL_DISK:
                where = folder or (os.path.dirname(os.path.abspath(exc.filename))
                                   if isinstance(exc.filename, str) else None)
                return cls(where, needed, exc.errno == errno.EDQUOT)
            exc = exc.__cause__ or exc.__context__
        return None
