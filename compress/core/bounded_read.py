"""Reading a file a run left (a report, a trial's record, a search's fingerprint) only
when it is a regular file of a sane size: a FIFO planted in its place would block the
reader forever, a link to /dev/zero would fill its memory.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path


class NotRegular(ValueError):
    """The path is a folder, a FIFO, a device or a socket, or larger than the limit."""


def read_regular(path: Path, limit: int) -> bytes:
    """The file's bytes when it is a regular file of at most `limit` bytes (links are
    followed: what is read is checked, not how it was named). Raises OSError (it cannot
    be opened) or NotRegular."""
    # O_NONBLOCK: opening a FIFO that no one writes returns at once (fstat then refuses it)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise NotRegular("not a regular file, but a folder, a FIFO, a device or a socket")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise NotRegular(f"larger than the {_size(limit)} it is read up to")
    return data


def _size(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit // 2**10} KiB"
