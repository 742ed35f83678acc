"""Content digests of model files (the pipeline's artifacts, XNNPACK's weight cache keys)."""
from __future__ import annotations

import hashlib


def sha256_file(path) -> str:
    """The hex SHA-256 of a file's bytes, read a megabyte at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
