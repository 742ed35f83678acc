"""How much memory an input takes, known before it is allocated: the arrays an .npz
declares (each .npy header's shape x dtype, each other entry's size in the zip's
directory) and random inputs of a model's declared shapes.

numpy allocates what an .npy header declares before it reads a byte of the data: a zip
bomb (a few KB of compressed zeros declaring 4 GiB) or a forged header took the process
down with a MemoryError, or had the kernel kill it, partway through. Here such an input
is refused first, by name, with its size and the memory this machine has available.
"""
from __future__ import annotations

import math
import os
import zipfile

import numpy as np

from runtimes.errors import RuntimeInputError

NPY_SUFFIX = ".npy"


def available_bytes() -> int:
    """Memory this machine can give a process now without swapping."""
    try:
        import psutil
        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - no psutil, or no /proc: the free pages
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def size_text(count: int) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if count >= scale:
            return f"{count / scale:,.1f} {unit}"
    return f"{count:,} bytes"


def check_fits(what: str, count: int, fix: str, error: type = RuntimeInputError) -> None:
    """Refuse `what` (`count` bytes) over half the memory available, with an `error`
    (the caller's own kind): the model, its outputs and the copies a run makes need the
    other half."""
    available = available_bytes()
    if count > available // 2:
        raise error(f"{what} takes {size_text(count)} ({count:,} bytes), more "
                                f"than half the {size_text(available)} of memory available "
                                f"here; {fix}")


def array_bytes(shape, dtype) -> int:
    """Bytes of an array of `shape` and `dtype` (exact: Python integers, no overflow)."""
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def _npy_header(member) -> tuple[tuple, np.dtype, int]:
    """(shape, dtype, header length) of the .npy at the start of a zip member."""
    fmt = np.lib.format
    version = fmt.read_magic(member)
    read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    shape, _, dtype = read(member)
    return shape, dtype, member.tell()


def _member_bytes(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: str) -> int:
    """What reading one member allocates: its .npy header's shape x dtype (numpy makes
    the array before it reads the data), or the size the zip declares for it."""
    with archive.open(info) as member:
        if member.read(len(np.lib.format.MAGIC_PREFIX)) != np.lib.format.MAGIC_PREFIX:
            return info.file_size
        member.seek(0)
        shape, dtype, header = _npy_header(member)
    declared = array_bytes(shape, dtype)
    if not dtype.hasobject and declared > info.file_size - header:
        name = info.filename.removesuffix(NPY_SUFFIX)
        raise RuntimeInputError(
            f"cannot read inputs file {path}: array '{name}' declares shape {tuple(shape)} "
            f"{dtype} ({size_text(declared)}) but holds {size_text(info.file_size - header)}"
            f": the file is damaged or forged; write it again (np.savez)")
    return declared


def check_npz(path: str) -> None:
    """Refuse an .npz whose arrays, read whole, would take more memory than this machine
    has available, or whose .npy headers declare more data than the archive holds; read
    from the zip's directory and each array's header, before any array is allocated."""
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
        total = sum(_member_bytes(archive, info, path) for info in members)
    check_fits(f"inputs file {path} ({len(members)} arrays)", total,
               "give fewer samples per file, or a machine with more memory")
