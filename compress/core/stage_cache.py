"""The stage cache shared by every run under one output folder (`runs/.stages/`).

A run keeps its own stage folders (`runs/<name>/NN-<stage>/`, which its report's paths
point into); a finished stage is also linked into the shared cache under its cache key,
so another run, a run under another name or a search trial that needs the same stage on
the same input finds it there and links it into its own folder instead of redoing it.
Hard links cost no space; where they cannot be made (another file system) files are
copied. An entry is written under a temporary name and renamed: a killed run never
leaves one a later run would trust, and every file is checked against its sha256 when
reused.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Optional

# Not stage.json: tools that list a run's finished stages look for that name.
RECORD = "cache.json"


def _link_tree(source: Path, dest: Path, skip: str) -> None:
    for path in source.rglob("*"):
        if path.is_dir() or path.name == skip:
            continue
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


def entry(cache_dir: Path, key: str) -> Path:
    return cache_dir / key[:2] / key


def share(cache_dir: Path, key: str, stage_dir: Path, record: dict) -> None:
    """Link a committed stage folder into the cache (once per key)."""
    final = entry(cache_dir, key)
    if final.is_dir():
        return
    tmp = final.with_name(f".{key}.tmp-{os.getpid()}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        _link_tree(stage_dir, tmp, skip="stage.json")
        slug = stage_dir.name
        shared = {**record, "artifacts": [
            {**a, "path": str(Path(a["path"]).relative_to(slug))} for a in record["artifacts"]]}
        (tmp / RECORD).write_text(json.dumps(shared, indent=2, default=str))
        os.replace(tmp, final)
    except OSError:
        pass   # another run shared it first, or no room: the run's own copy stands
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def lookup(cache_dir: Path, key: str) -> Optional[tuple[Path, dict]]:
    """(the entry's folder, its record) for `key`, if there is one."""
    folder = entry(cache_dir, key)
    try:
        record = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return (folder, record) if record.get("key") == key else None


def link_into(folder: Path, dest: Path) -> None:
    """The entry's files into a stage's (empty, private) folder."""
    _link_tree(folder, dest, skip=RECORD)
