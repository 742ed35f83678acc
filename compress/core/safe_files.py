"""Files a run writes inside its folder, never through a link planted there, and a full
disk said as such.

A run folder may sit where others can write (a CI cache shared between jobs): a link
planted at a name compress writes (`.lock`, `history`, `report.json`, a stage folder, a
temporary name) would have it truncate or overwrite the file the link points to. So
every entry compress creates, truncates, renames over or removes inside a run folder
goes through here: the last component is never followed (O_NOFOLLOW, lstat), temporary
files are created exclusively (O_EXCL) under unguessable names, and anything else than
what compress writes there (a link, a folder where a file goes, a FIFO) is an InTheWay
(exit 2) naming it. The folder the user names (`output:`) may itself be reached through
a link (/tmp on macOS, a linked home); only what is inside it is checked.

A full disk (ENOSPC, EDQUOT) while writing is a NoSpace naming the disk and the size
being written; the temporary file is removed, so nothing half-written is left.
"""
from __future__ import annotations

import os
import secrets
import shutil
import stat
from pathlib import Path

from compress.errors import ConfigError, NoSpace

_KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO",
          stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device",
          stat.S_IFREG: "a file"}
# a new file, made by this call: never over an existing name, never through a link
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def kind_of(path, mode: int) -> str:
    """What is at `path` (its lstat mode), in words: "a FIFO", "a symbolic link (to X)"."""
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    if stat.S_ISLNK(mode):
        try:
            kind += f" (to {os.readlink(path)})"
        except OSError:
            pass
    return kind


class InTheWay(ConfigError):
    """Something compress did not make (a link, a folder, a FIFO) at a name it writes in a
    run folder."""

    def __init__(self, path, mode: int, wanted: str, kind: str = ""):
        kind = kind or kind_of(path, mode)
        super().__init__(
            f"{path} is {kind}, where compress writes {wanted}: it never writes through a "
            "link, nor over something it did not make, inside a run folder (a link there "
            "would have it overwrite the file the link points to); remove it and run again")


def _mode(path) -> int | None:
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None


def expect(path, folder: bool = False) -> None:
    """Nothing at `path`, or what compress writes there (a file; `folder`: a folder),
    never a link: else InTheWay."""
    mode = _mode(path)
    if mode is not None and not (stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)):
        raise InTheWay(path, mode, "a folder" if folder else "a file")


def reraise(exc: OSError, folder, needed: int | None = None):
    """Raise `exc` again, or the NoSpace it is (a full disk under `folder`)."""
    full = NoSpace.found_in(exc, folder, needed)
    if full is None:
        raise exc
    raise full from exc


def _write_new(path: Path, raw: bytes) -> None:
    """`raw` into a file that must not exist yet; removed again if it cannot be finished."""
    try:
        fd = os.open(path, NEW_FILE, 0o666)
    except FileExistsError:
        raise InTheWay(path, _mode(path) or stat.S_IFREG, "a new file") from None
    except OSError as exc:
        reraise(exc, path.parent, len(raw))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
    except BaseException as exc:
        path.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            reraise(exc, path.parent, len(raw))
        raise


def create_new(path, data: str | bytes) -> None:
    """A new file (a crash log): never over an existing name, never through a link."""
    _write_new(Path(path), data.encode() if isinstance(data, str) else data)


def write_temp(path, data: str | bytes) -> Path:
    """`data`, whole, in a new temporary file beside `path` (checked first: nothing but
    a file of compress's at `path`); install() puts it in place."""
    path = Path(path)
    expect(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    _write_new(tmp, data.encode() if isinstance(data, str) else data)
    return tmp


def install(tmp: Path, path) -> None:
    """The temporary file in the place of `path` (a rename, never through a link)."""
    try:
        expect(path)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path, data: str | bytes) -> None:
    """`path` replaced by `data` at once: a reader sees the old file or the new, whole."""
    install(write_temp(path, data), path)


def write_set(files: list[tuple[Path, str | bytes]]) -> None:
    """Files that stand together (a run's reports): every one written whole to its
    temporary first, then renamed into place in the order given (the one that says the
    set is finished last); if one cannot be written, none of the new ones is."""
    temps = []
    try:
        for path, data in files:
            temps.append((write_temp(path, data), path))
        while temps:
            install(*temps[0])
            temps.pop(0)
    finally:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)


def open_regular(path) -> int:
    """A read-write descriptor of a regular file (the run's lock), created if missing;
    never of a link's target, a FIFO or a folder (InTheWay)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK |
                     os.O_CLOEXEC, 0o644)
    except OSError as exc:
        mode = _mode(path)
        if mode is not None and not stat.S_ISREG(mode):
            raise InTheWay(path, mode, "its lock file") from None
        reraise(exc, path.parent)
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
        os.close(fd)   # a hard link's other name may be anyone's file: it is truncated
        raise InTheWay(path, found.st_mode, "its lock file", "" if found.st_nlink == 1 else
                       f"a file with {found.st_nlink} names (hard links)")
    os.set_blocking(fd, True)
    return fd


def make_dir(path, fresh: bool = False) -> Path:
    """A folder inside a run folder, made if missing (`fresh`: made now, by this call,
    or InTheWay); never a link (InTheWay)."""
    path = Path(path)
    try:
        os.mkdir(path)
    except FileExistsError:
        expect(path, folder=True)
        if fresh:
            raise InTheWay(path, stat.S_IFDIR, "a new folder of its own") from None
    except OSError as exc:
        reraise(exc, path.parent)
    return path


def make_run_dir(run_dir) -> Path:
    """The user's output folder (made if missing; it may be reached through a link), then
    the run folder in it, which must be a folder of its own, not a link."""
    run_dir = Path(run_dir)
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"output: {run_dir.parent} is not a folder; give `output:` (or "
                          "--output) a folder") from None
    except OSError as exc:
        reraise(exc, run_dir.parent)
    return make_dir(run_dir)


def remove(path) -> None:
    """A leftover of compress's (a temporary file or folder): removed; a link in its
    place is not followed but refused (InTheWay), as where compress writes."""
    mode = _mode(path)
    if mode is None:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path, ignore_errors=True)
    elif stat.S_ISREG(mode):
        Path(path).unlink(missing_ok=True)
    else:
        raise InTheWay(path, mode, "a file or folder of its own")


def full_disk(folder, low: int = 1 << 20) -> bool:
    """Whether the disk under `folder` has less than `low` bytes left for compress: after
    a failure, the sign that a write was cut short (a library that reports a truncated
    file as a parse error, or not at all)."""
    try:
        disk = os.statvfs(folder)
    except OSError:
        return False
    return disk.f_bavail * disk.f_frsize < low
