"""Artifacts: immutable files in the run directory, with size and sha256.

Each stage writes into a private temporary directory; only when it succeeded does the
runner record `stage.json` (cache key + artifact digests) and rename the directory into
place. A killed or failed stage therefore never leaves a directory a later run trusts:
a stage directory without a matching `stage.json` is deleted and redone. None of it goes
through a link planted in the run folder (compress.core.safe_files), and a stage that
fails on an all but full disk is said to have (NoSpace), whatever the library called it.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from compress.core import stage_cache
from compress.core.safe_files import (expect, full_disk, make_dir, make_run_dir, remove,
                                      write_atomic)
from compress.errors import NoSpace
from runtimes.digest import sha256_file  # noqa: F401  (also imported from here)

STAGE_RECORD = "stage.json"


@dataclass(frozen=True)
class Artifact:
    id: str
    format: str        # torch | onnx
    precision: str     # fp32 | int8 | ...
    stage: str
    parent: Optional[str]
    path: str          # relative to the run directory
    size_bytes: int
    sha256: str
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Output:
    """What a stage returns: a file it wrote into its directory, plus what it is."""
    path: Path
    format: str
    precision: str
    meta: dict = field(default_factory=dict)


def artifact_files(path: Path) -> list[Path]:
    """The files of an artifact: the model and, where it keeps them apart, its weights
    (runtimes.formats.model_files: the runner counts the same files in a model's size);
    every file of a folder artifact (a language model's), in a stable order."""
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file())
    from runtimes.formats import model_files
    return [Path(p) for p in model_files(str(path))]


def sha256_artifact(path: Path) -> str:
    """sha256 over every file of the artifact (for one file, that file's sha256)."""
    h = hashlib.sha256()
    folder = Path(path).is_dir()
    for part in artifact_files(path):
        if folder:   # a file's name and length are part of a folder's content
            h.update(f"{part.relative_to(path)}\0{part.stat().st_size}\0".encode())
        with open(part, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def write_json_atomic(path: Path, data) -> None:
    """`path` replaced at once, never through a link (compress.core.safe_files)."""
    write_atomic(path, json.dumps(data, indent=2, default=str))


class StageDir:
    """The directory `runs/<name>/NN-<stage>/` of one stage."""

    def __init__(self, run_dir: Path, slug: str, artifact_id: str | None = None,
                 shared: Path | None = None):
        self.run_dir, self.slug = run_dir, slug
        self.artifact_id = artifact_id or slug
        self.final = run_dir / slug
        self.tmp = run_dir / f".{slug}.partial"
        self.shared = shared   # the stage cache of every run (compress.core.stage_cache)

    def cached(self, key: str) -> Optional[list[Artifact]]:
        """The artifacts of a finished run of this stage with this key, if still intact."""
        record_path = self.final / STAGE_RECORD
        expect(self.final, folder=True)   # a link would hand in another folder's files
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            return None
        if record.get("key") != key:
            return None
        artifacts = [Artifact(**a) for a in record["artifacts"]]
        return artifacts if self._intact(artifacts) else None

    def _intact(self, artifacts: list[Artifact]) -> bool:
        return all((self.run_dir / a.path).exists()
                   and sha256_artifact(self.run_dir / a.path) == a.sha256 for a in artifacts)

    def from_shared(self, key: str, parent: Optional[str] = None) -> Optional[list[Artifact]]:
        """The stage as another run (or search trial) made it: linked into this run's
        folder from the shared cache, named as this run names it (`parent`: the id this
        run gives the stage's input); None if not there."""
        found = stage_cache.lookup(self.shared, key) if self.shared else None
        if found is None:
            return None
        folder, record = found
        self.begin()
        stage_cache.link_into(folder, self.tmp)
        many = len(record["artifacts"]) > 1
        artifacts = [Artifact(**{**a, "id": f"{self.artifact_id}.{i}" if many else self.artifact_id,
                                 "parent": parent, "path": str(Path(self.slug) / a["path"])})
                     for i, a in enumerate(record["artifacts"])]
        if not self._intact_in_tmp(artifacts):
            self.abort()
            return None
        self._install(key, artifacts, record["stage"], record["config"])
        return artifacts

    def _intact_in_tmp(self, artifacts: list[Artifact]) -> bool:
        return all(sha256_artifact(self.tmp / Path(a.path).relative_to(self.slug)) == a.sha256
                   for a in artifacts)

    def begin(self) -> Path:
        """The stage's private folder, made new: what the stage writes in it cannot go
        through a link someone else put there."""
        make_run_dir(self.run_dir)
        remove(self.tmp)
        return make_dir(self.tmp, fresh=True)

    def abort(self) -> None:
        """Remove a failed stage's files; a no-op after a commit. Called from a `finally`:
        where the stage failed on a full disk (an OSError ENOSPC wrapped by a library, or
        a file cut short that a library then calls unreadable: its disk is all but full
        now, before its files go), the failure is raised as the NoSpace it is."""
        failed = sys.exc_info()[1]
        full = None
        if isinstance(failed, Exception) and os.path.isdir(self.tmp):
            full = NoSpace.found_in(failed, self.run_dir) or (
                NoSpace(self.run_dir, during=_first_cause(failed)) if full_disk(self.tmp)
                else None)
        remove(self.tmp)
        if full is not None and full is not failed:
            raise full from failed

    def commit(self, key: str, outputs: list[Output], stage: str, parent: Optional[str],
               config: dict) -> list[Artifact]:
        artifacts = []
        for index, out in enumerate(outputs):
            rel_inside = Path(out.path).resolve().relative_to(self.tmp.resolve())
            artifact_id = (self.artifact_id if len(outputs) == 1
                           else f"{self.artifact_id}.{index}")
            artifacts.append(Artifact(
                id=artifact_id, format=out.format, precision=out.precision, stage=stage,
                parent=parent, path=str(Path(self.slug) / rel_inside),
                size_bytes=sum(os.path.getsize(p) for p in artifact_files(out.path)),
                sha256=sha256_artifact(Path(out.path)), meta=out.meta))
        self._install(key, artifacts, stage, config)
        if self.shared:
            stage_cache.share(self.shared, key, self.final, self._record(key, artifacts, stage,
                                                                         config))
        return artifacts

    @staticmethod
    def _record(key, artifacts, stage, config) -> dict:
        return {"key": key, "stage": stage, "config": config,
                "artifacts": [a.to_dict() for a in artifacts]}

    def _install(self, key, artifacts, stage, config) -> None:
        write_json_atomic(self.tmp / STAGE_RECORD, self._record(key, artifacts, stage, config))
        remove(self.final)   # a link in its place is refused, never followed
        os.replace(self.tmp, self.final)


def _first_cause(exc: BaseException) -> str:
    """The error a failure started from (a library's parse error under our ModelError)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]


def cache_key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
