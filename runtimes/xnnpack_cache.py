"""XNNPACK's weight cache: the weights packed into XNNPACK's own layout once, kept in a
file, and mapped from it by every later load of the same model.

Without it every LiteRT session packs the weights again in its own heap; with the file
present EfficientNet-Lite0's FP32 file (18 MB) loads 2.7x faster in 13 MB less memory,
while files of a few MB or less gain nothing (docs/engines.md, "LiteRT settings that
matter"). ai-edge-litert reaches it through its
CompiledModel API only (CpuOptions.xnnpack_weight_cache_path).

LiteRT matches a cache file to a model by buffer position, not by content: a model
re-exported with other weights at the same path silently runs with the old weights
(tests/runtimes/test_xnnpack_cache.py shows it: the digits CNN with its weights halved
gave the original's outputs). So
the file's name here is a digest of the model's bytes and of what decides the packed
layout (the LiteRT version, the CPU's architecture and its SIMD features): a changed
model, runtime or machine gets a file of its own, never a stale one, and a copy of a model
(what a benchmark pushes to a device) finds the file its original wrote. Hashing every
byte of the model at each load would spend much of what the cache saves, so each file's
digest is kept beside the caches under a key of its path, inode, size and modification
time: a model is read once, not at every load.
"""
from __future__ import annotations

import hashlib
import os

from runtimes.errors import RuntimeInputError
from runtimes.hostinfo import describe_host
from runtimes.digest import sha256_file

SUFFIX = ".xnnpack_cache"


def _litert_version() -> str:
    try:
        import ai_edge_litert
    except ImportError:   # the session refuses to open without it, first
        return "unknown"
    return getattr(ai_edge_litert, "__version__", "unknown")


def _remembered_digest(model_path: str, directory: str) -> str:
    """The model's content digest, read from the memo under `directory` when this very
    file (path, inode, size, modification time) was hashed before."""
    info = os.stat(model_path)
    seen = "\0".join(map(str, (os.path.realpath(model_path), info.st_dev, info.st_ino,
                               info.st_size, info.st_mtime_ns)))
    memo = os.path.join(directory, "digests", hashlib.sha256(seen.encode()).hexdigest()[:32])
    try:
        with open(memo) as fh:
            return fh.read().strip()
    except OSError:
        pass
    digest = sha256_file(model_path)
    os.makedirs(os.path.dirname(memo), exist_ok=True)
    partial = f"{memo}.{os.getpid()}.tmp"
    with open(partial, "w") as fh:
        fh.write(digest)
    os.replace(partial, memo)   # atomic: a concurrent reader sees all of it or none
    return digest


def cache_key(model_path: str, directory: str) -> str:
    """A digest of the model's bytes, the LiteRT version and the CPU's packing-relevant
    features."""
    host = describe_host()
    parts = [_remembered_digest(model_path, directory), _litert_version(), host["arch"],
             *host["cpu_flags"]]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def cache_file(model_path: str, directory: str) -> str:
    """The cache file for `model_path` in `directory` (made if missing; `~` expanded)."""
    directory = os.path.expanduser(directory)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise RuntimeInputError(f"the XNNPACK weight cache directory '{directory}' cannot be "
                                f"made ({exc.strerror}); give a writable directory") from None
    if not os.access(directory, os.W_OK):
        raise RuntimeInputError(f"the XNNPACK weight cache directory '{directory}' is not "
                                "writable; give a writable directory")
    # the key alone: a copy under another name is the same model
    return os.path.join(directory, cache_key(model_path, directory) + SUFFIX)


def describe_file(path: str, existed: bool) -> dict:
    """What the record says of the cache: its file, whether the load found it already
    there (a hit: weights mapped, not packed), and its size after the load."""
    size = os.path.getsize(path) if os.path.exists(path) else None
    return {"file": path, "hit": existed, "bytes": size}
