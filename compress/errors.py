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
    └── RemoteError               an SSH target cannot be reached or answers oddly

runtimes/ (torch-free, below this layer) raises its own RuntimeInputError; the pipeline
turns it into one of these where it calls the runtimes.

The CLI catches `CompressError` only: it prints the message (one paragraph, no
traceback) and exits 2. Every other exception is a bug: exit 3, one line, its traceback
in a crash log (compress/runner/crash.py). Where the pipeline hands the user's model to
a third-party library, `blame_library` turns an exception raised inside that library
into a ModelError; one raised in our own code stays a bug.
"""
from __future__ import annotations

import re

# terminal colour and cursor codes that libraries (torch's exporter, rich) put in their
# messages: printed again inside ours they garble a log file or a CI page
_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class CompressError(Exception):
    """Bad input or an environment problem the user can fix."""

    exit_code = 2

    def __init__(self, *args):
        super().__init__(*(_TERMINAL_CODES.sub("", a) if isinstance(a, str) else a
                           for a in args))


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
