"""What native libraries print straight to file descriptors 1 and 2 (absl and LiteRT C++
logs, TensorFlow's converter, torchao load failures): kept off the user's screen, and
kept for the error message when the call that printed it fails."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings


class CapturedOutput:
    """The text written to fds 1 and 2 inside `native_output_captured()`, readable
    after the block ends (also when it raised)."""

    def __init__(self) -> None:
        self.text = ""

    def lines_with(self, *markers: str) -> list[str]:
        """The lines holding any of `markers`, whitespace collapsed, without repeats."""
        seen: list[str] = []
        for line in self.text.splitlines():
            line = " ".join(line.split())
            if line and any(m in line for m in markers) and line not in seen:
                seen.append(line)
        return seen


@contextlib.contextmanager
def native_output_captured():
    """Send what is printed to fds 1 and 2 (and Python warnings) to a scratch file
    instead of the user's screen; errors still surface as exceptions. Yields a
    CapturedOutput whose `text` is filled in when the block ends."""
    captured = CapturedOutput()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with tempfile.TemporaryFile() as scratch, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fd in saved:
            os.dup2(scratch.fileno(), fd)
        try:
            yield captured
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            scratch.seek(0)
            captured.text = scratch.read().decode("utf-8", "replace")
