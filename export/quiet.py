"""Keep what native libraries print straight to file descriptors 1 and 2 (absl and
TensorFlow C++ logs, torchao load failures, progress lines) off the user's screen."""
from __future__ import annotations

from runtimes.native_log import native_output_captured as native_output_hidden  # noqa: F401
