"""The stage cache shared by every run under one output folder (`runs/.stages/`).

A run keeps its own stage folders (`runs/<name>/NN-<stage>/`, which its report's paths
point into); a finished stage is also linked into the shared cache under its cache key,
so another run, a run under another name or a search trial that needs the same stage on
the same input finds it there and links it into its own folder instead of redoing it.
Hard links cost no space; where they cannot be made (another file system) files are
copied. An entry is written under a temporary name and renamed: a killed run never
leaves one a later run would trust, and every file is checked against its sha256 when
reused.

The output folder may sit where others can write (a CI cache shared between jobs), so
nothing in the cache is trusted for its name. An entry that is a link, or holds a link, a
FIFO or a device, or whose record names files it does not hold, is never followed nor
read through: it is a miss (Untrusted, said in a note), the stage is made again and the
entry replaced by the run's own. Where the cache's own folders (`.stages`, its two-letter
shards) are not plain folders the cache is not used at all: a link there could not be
replaced without removing what someone put there. Nothing is written through a link: an
entry is built under a fresh name and renamed into place (a rename replaces a name,
never what a link points to), every file is created exclusively, never followed.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import stat
from pathlib import Path, PurePosixPath
from typing import Iterator, Optional

from compress.core.bounded_read import NotRegular, open_regular_file, read_regular
from compress.core.safe_files import NEW_FILE, create_new, kind_of, make_dir, remove, reraise
from compress.errors import CompressError

# Not stage.json: tools that list a run's finished stages look for that name.
RECORD = "cache.json"
RECORD_LIMIT = 16 << 20   # a record lists a stage's few artifacts: a few KiB
# what a record says of each artifact: artifacts.Artifact's fields (that module imports
# this one; a test holds the two together)
ARTIFACT_FIELDS = frozenset({"id", "format", "precision", "stage", "parent", "path",
                             "size_bytes", "sha256", "meta"})
MAX_DEPTH = 16   # a stage's files: a model, its weights, a language model's folder


class Untrusted(Exception):
    """Something in the stage cache that is not what compress makes there: not used (a
    miss), and the run says so in a note."""


def _refused(folder: Path, what: str) -> Untrusted:
    return Untrusted(f"stage cache entry {folder} {what}: not used (never followed); the "
                     "stage is made again and the entry replaced")


def _cache_folder(path: Path) -> bool:
    """Whether the cache's own folder (`.stages`, a shard) is there; Untrusted where
    something else than a folder is."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(mode):
        raise Untrusted(f"stage cache: {path} is {kind_of(path, mode)}, not the cache's own "
                        "folder: the cache is not used (nothing is read from it or written "
                        "through it) and this run makes its stages itself; remove it so "
                        "runs share their stages again")
    return True


def _walk(folder: Path) -> Iterator[tuple[Path, bool]]:
    """(path, is a folder) of everything under `folder`, a folder before what it holds,
    no link followed; Untrusted at anything else than a file or a folder, or deeper
    than any stage folder is (no recursion a planted tree could exhaust)."""
    stack = [(folder, 0)]
    while stack:
        current, depth = stack.pop()
        with os.scandir(current) as found:
            items = sorted(found, key=lambda e: e.name, reverse=True)
        for item in items:
            path = Path(item.path)
            is_dir = item.is_dir(follow_symlinks=False)
            if item.is_symlink() or not (is_dir or item.is_file(follow_symlinks=False)):
                kind = kind_of(path, item.stat(follow_symlinks=False).st_mode)
                raise Untrusted(f"holds {path.relative_to(folder)}, {kind}, which compress "
                                "never puts in a stage folder")
            if is_dir and depth >= MAX_DEPTH:
                raise Untrusted(f"holds {path.relative_to(folder)}, deeper than compress "
                                "ever nests a stage's files")
            yield path, is_dir
            if is_dir:
                stack.append((path, depth + 1))


def entry(cache_dir: Path, key: str) -> Path:
    return cache_dir / key[:2] / key


def _read_record(path: Path) -> dict:
    """The entry's record, read without following a link; Untrusted if it is no record
    of compress's."""
    try:
        raw = read_regular(path, RECORD_LIMIT, follow=False)
    except OSError as exc:   # a link: ELOOP
        raise Untrusted(f"has no readable {RECORD} ({exc.strerror})") from None
    except NotRegular as exc:
        raise Untrusted(f"has a {RECORD} that is {exc}") from None
    try:
        record = json.loads(raw)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        raise Untrusted(f"has a {RECORD} that is not a record compress writes")
    return record


def _inside(path) -> bool:
    """A plain relative path that stays inside the entry's folder."""
    if not isinstance(path, str) or not path or "\\" in path:
        return False
    parts = PurePosixPath(path).parts
    return not PurePosixPath(path).is_absolute() and ".." not in parts and parts != (".",)


def _check_record(record: dict, key: str, folder: Path) -> None:
    """Untrusted unless the record is for `key` and describes artifacts inside `folder`."""
    artifacts = record.get("artifacts")
    if record.get("key") != key or not isinstance(record.get("stage"), str) or \
            not isinstance(record.get("config"), dict) or not isinstance(artifacts, list) or \
            not artifacts or not all(isinstance(a, dict) and set(a) == ARTIFACT_FIELDS
                                     for a in artifacts):
        raise Untrusted(f"has a {RECORD} that is not this stage's record")
    for artifact in artifacts:
        if not _inside(artifact["path"]) or not os.path.lexists(folder / artifact["path"]):
            raise Untrusted(f"has a {RECORD} naming {artifact['path']!r}, which is not a file "
                            "it holds")


def lookup(cache_dir: Path, key: str) -> Optional[tuple[Path, dict]]:
    """(the entry's folder, its record) for `key`, if there is one. Untrusted (a miss the
    run says) where the cache's folders or the entry are not what compress makes."""
    folder = entry(cache_dir, key)
    if not (_cache_folder(cache_dir) and _cache_folder(folder.parent)):
        return None
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return None
    try:
        if not stat.S_ISDIR(mode):
            raise Untrusted(f"is {kind_of(folder, mode)}")
        for _ in _walk(folder):
            pass
        record = _read_record(folder / RECORD)
        _check_record(record, key, folder)
    except Untrusted as exc:
        raise _refused(folder, str(exc)) from None
    return folder, record


def _place(source: Path, dest: Path) -> None:
    """One regular file of an entry or a stage folder at `dest` (new): a hard link, else
    a copy; never of what a link points to."""
    try:
        os.link(source, dest, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOENT):
            raise
        _copy(source, dest)
        return
    if not stat.S_ISREG(os.lstat(dest).st_mode):   # swapped for a link since the walk
        os.unlink(dest)
        raise Untrusted(f"{source.name} is no longer a file")


def _copy(source: Path, dest: Path) -> None:
    try:
        src = open_regular_file(source, follow=False)
    except NotRegular as exc:
        raise Untrusted(f"{source.name} became {kind_of(source, exc.mode)}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Untrusted(f"{source.name} became a symbolic link") from None
        raise
    with src:
        found = os.fstat(src.fileno())
        try:
            with os.fdopen(os.open(dest, NEW_FILE, found.st_mode & 0o777), "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        except OSError as exc:
            reraise(exc, dest.parent, found.st_size)


def _copy_tree(source: Path, dest: Path, skip: str) -> None:
    """The files under `source` (but its own `skip`) into the new folder `dest`."""
    for path, is_dir in _walk(source):
        if path.parent == source and path.name == skip:
            continue
        target = dest / path.relative_to(source)
        if is_dir:
            make_dir(target, fresh=True)
        else:
            _place(path, target)


def _standing(final: Path, key: str) -> bool:
    """Whether a trusted entry for `key` is in place; an untrusted one is removed."""
    try:
        mode = os.lstat(final).st_mode
    except FileNotFoundError:
        return False
    try:
        return lookup(final.parent.parent, key) is not None
    except Untrusted:
        # a link itself, never what it points to; a folder's links, never followed (a
        # tree too deep to remove stays, and the rename onto it then fails: not shared)
        with contextlib.suppress(OSError, RecursionError):
            shutil.rmtree(final) if stat.S_ISDIR(mode) else final.unlink()
        return False


def share(cache_dir: Path, key: str, stage_dir: Path, record: dict) -> None:
    """Link a committed stage folder into the cache (once per key; an untrusted entry is
    replaced). Best effort: where it cannot be done (no room, another run shared it first,
    the cache's folders are not plain folders), the run's own copy stands."""
    final = entry(cache_dir, key)
    tmp = final.with_name(f".{key}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        make_dir(make_dir(cache_dir).joinpath(key[:2]))   # never a link (InTheWay)
        if _standing(final, key):
            return
        make_dir(tmp, fresh=True)
        _copy_tree(stage_dir, tmp, skip="stage.json")
        slug = stage_dir.name
        shared = {**record, "artifacts": [
            {**a, "path": str(Path(a["path"]).relative_to(slug))} for a in record["artifacts"]]}
        create_new(tmp / RECORD, json.dumps(shared, indent=2, default=str))
        os.replace(tmp, final)   # onto a link or a folder it fails: nothing through either
    except (OSError, CompressError, Untrusted):
        pass
    finally:
        try:
            remove(tmp)
        except CompressError:
            pass


def link_into(folder: Path, dest: Path) -> None:
    """The entry's files into a stage's (empty, private) folder; Untrusted where the
    entry changed into something compress does not make since it was looked up."""
    try:
        _copy_tree(folder, dest, skip=RECORD)
    except Untrusted as exc:
        raise _refused(folder, f"changed while it was read ({exc})") from None
