"""Reading a file a run left (a report, a trial's record, a search's fingerprint, a stage
cache entry) only when it is a regular file of a sane size: a FIFO planted in its place
would block the reader forever, a link to /dev/zero would fill its memory.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO


class NotRegular(ValueError):
    """The path is a folder, a FIFO, a device or a socket (`mode`: what it is), or larger
    than the limit."""

    def __init__(self, message: str, mode: int | None = None):
        super().__init__(message)
        self.mode = mode


def open_regular_file(path: Path, follow: bool = True) -> BinaryIO:
    """The file opened for reading when it is a regular file (`follow`: through a link;
    else a link is an OSError, ELOOP). Raises OSError (it cannot be opened) or NotRegular."""
    # O_NONBLOCK: opening a FIFO that no one writes returns at once (fstat then refuses it)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    file = os.fdopen(os.open(path, flags), "rb")
    mode = os.fstat(file.fileno()).st_mode
    if not stat.S_ISREG(mode):
        file.close()
        raise NotRegular("not a regular file, but a folder, a FIFO, a device or a socket",
                         mode)
    return file


def read_regular(path: Path, limit: int, follow: bool = True) -> bytes:
    """The file's bytes when it is a regular file of at most `limit` bytes (`follow`:
    links are followed, what is read is checked, not how it was named; else a link is an
    OSError). Raises OSError (it cannot be opened) or NotRegular."""
    with open_regular_file(path, follow) as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise NotRegular(f"larger than the {_size(limit)} it is read up to")
    return data


def _size(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit // 2**10} KiB"
