"""A scratch working directory for libraries that write into the current one.

neural-compressor creates ./nc_workspace; onnxruntime's symbolic shape inference (in
quant_pre_process) saves sym_shape_infer_temp.onnx and its weights under random names
there, and leaves them when it fails. Neither may litter the user's folder.
"""
from __future__ import annotations

import contextlib
import os
import tempfile


@contextlib.contextmanager
def in_scratch_dir():
    """Run the block in a temporary working directory, removed afterwards; paths handed
    to the library inside must be absolute."""
    old = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="edge-compress-") as scratch:
        os.chdir(scratch)
        try:
            yield scratch
        finally:
            os.chdir(old)
