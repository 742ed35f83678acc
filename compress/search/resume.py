"""What a search keeps between sessions, and when it must not trust it.

Finished trials leave `trial.json` in their folders and an Optuna study its sqlite file.
They are reused only by the same search: the same pipeline settings and space, the same
source model (its contents), the same target profiles (their contents). Anything else,
or `--force`, sets the old trials and study aside (renamed, never deleted: their stages
stay in the stage cache) and starts afresh. A trial that failed is run again: what made
it fail (a missing package, a file) may have been fixed since.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Optional

from compress.core.artifacts import write_json_atomic

FINGERPRINT = "search.json"


def fingerprint(pipeline, targets) -> str:
    from compress.runner.history import config_record
    from compress.model.source import source_digest
    from pydantic_core import to_jsonable_python
    parts = [config_record(pipeline), source_digest(pipeline),
             to_jsonable_python([(name, profile.model_dump()) for name, profile in targets])]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _set_aside(path: Path, old: str) -> Optional[Path]:
    if not path.exists():
        return None
    aside = path.with_name(f"{path.stem}-{old[:8]}{path.suffix}")
    if aside.exists():
        shutil.rmtree(aside) if aside.is_dir() else aside.unlink()
    path.rename(aside)
    return aside


def prepare(out: Path, trials: str, study: str, print_, current: str, force: bool) -> None:
    """Set aside what another search (or this one, under --force) left in `out`."""
    record = out / trials / FINGERPRINT
    try:
        old = json.loads(record.read_text())["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError):
        old = None if not (out / trials).exists() else "unknown0"
    if old is not None and (old != current or force):
        moved = [p for p in (_set_aside(out / trials, old), _set_aside(out / study, old)) if p]
        why = "--force" if force and old == current else "the pipeline, its model or " \
            "its profiles changed since"
        print_(f"search: {why}: earlier trials set aside in "
               f"{', '.join(str(p.name) for p in moved)}")
    (out / trials).mkdir(parents=True, exist_ok=True)
    write_json_atomic(record, {"fingerprint": current})


def finished(out: Path, trials: str, record: str, trial_cls) -> dict:
    """{trial id: Trial} of the trials that completed."""
    found = {}
    for path in sorted((out / trials).glob(f"*/{record}")):
        try:
            trial = trial_cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue   # a record from another version: that trial is run again
        if trial.state == "complete" and trial.variant_key:
            found[trial.id] = trial
    return found
