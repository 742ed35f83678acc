"""Keep what native libraries print straight to file descriptors 1 and 2 (absl and
TensorFlow C++ logs, torchao load failures, progress lines) off the user's screen."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings


@contextlib.contextmanager
def native_output_hidden():
    """Send what is printed to fds 1 and 2 (and Python warnings) to a scratch file
    instead of the user's screen; errors still surface as exceptions."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with tempfile.TemporaryFile() as scratch, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fd in saved:
            os.dup2(scratch.fileno(), fd)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
