"""What a search keeps between sessions, and when it must not trust it.

Finished trials leave `trial.json` in their folders and an Optuna study its sqlite file.
They are reused only by the same search: the same pipeline settings and space, the same
source model (its contents), the same target profiles (their contents). Anything else,
or `--force`, sets the old trials and study aside (renamed, never deleted: their stages
stay in the stage cache) and starts afresh. A trial that failed is run again: what made
it fail (a missing package, a file) may have been fixed since. A finished trial's record
is trusted only when it reads as the type it was written as, lies in its own trial's
folder and its parameters still make the variant it names: any other is noted with its
path and the trial run again, never taken for a twin of another.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Optional

from pydantic import TypeAdapter, ValidationError

from compress.core.artifacts import write_json_atomic
from compress.core.bounded_read import NotRegular, read_regular
from compress.core.safe_files import expect, make_dir, remove
from compress.runner.report_schema import first_error

FINGERPRINT = "search.json"
RECORD_LIMIT = 2**20   # a trial's record or the fingerprint: a few hundred bytes


def fingerprint(pipeline, targets) -> str:
    from compress.runner.history import config_record
    from compress.model.source import source_digest
    from pydantic_core import to_jsonable_python
    parts = [config_record(pipeline), source_digest(pipeline),
             to_jsonable_python([(name, profile.model_dump()) for name, profile in targets])]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _set_aside(path: Path, old: str) -> Optional[Path]:
    if not os.path.lexists(path):
        return None
    expect(path, folder=path.suffix != ".db")   # a link there is refused, not moved
    aside = path.with_name(f"{path.stem}-{old[:8]}{path.suffix}")
    remove(aside)
    path.rename(aside)
    return aside


def _recorded(record: Path) -> Optional[str]:
    """The fingerprint a search left in its trials folder, None where there is none
    that could be one (a file cut short, edited, or nested past any sense)."""
    try:
        old = json.loads(read_regular(record, RECORD_LIMIT))["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError, IndexError, RecursionError):
        return None   # NotRegular (a FIFO, a device) is a ValueError
    return old if isinstance(old, str) and re.fullmatch(r"[0-9a-f]{64}", old) else None


def prepare(out: Path, trials: str, study: str, print_, current: str, force: bool) -> None:
    """Set aside what another search (or this one, under --force) left in `out`."""
    record = out / trials / FINGERPRINT
    old = _recorded(record)
    if old is None and any(os.path.lexists(out / name) for name in (trials, study)):
        old = "unknown0"   # no record of whose they are: not trusted, set aside
    if old is not None and (old != current or force):
        moved = [p for p in (_set_aside(out / trials, old), _set_aside(out / study, old)) if p]
        why = "--force" if force and old == current else "the pipeline, its model or " \
            "its profiles changed since"
        print_(f"search: {why}: earlier trials set aside in "
               f"{', '.join(str(p.name) for p in moved)}")
    make_dir(out / trials)
    write_json_atomic(record, {"fingerprint": current})


def finished(out: Path, trials: str, record: str, trial_cls, stale: dict) -> dict:
    """{trial id: Trial} of the trials that completed, each record read as the type it
    was written as (strictly: a string is not read as a number) from its own folder. One
    that cannot be read so, or that names another folder's trial, goes to `stale`
    ({path: why}): its trial is run again."""
    found, records = {}, TypeAdapter(trial_cls)
    for path in sorted((out / trials).glob(f"*/{record}")):
        try:
            trial = records.validate_json(read_regular(path, RECORD_LIMIT), strict=True)
        except FileNotFoundError:
            continue
        except (OSError, NotRegular, ValidationError) as exc:
            stale[path] = _unreadable(exc)
            continue
        if trial.id != path.parent.name:
            stale[path] = f"it records trial {trial.id!r}, not {path.parent.name!r}"
        elif trial.state == "complete" and trial.variant_key:
            found[trial.id] = trial
    return found


def _unreadable(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return first_error(exc)
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _plain(value):
    """A choice as it reads back from JSON (a tuple as a list)."""
    return json.loads(json.dumps(value, default=repr))


def _chosen(space: list, params) -> Optional[dict]:
    """`params` as the space's own choices, None when they are not a combination of it."""
    if not isinstance(params, dict) or set(params) != {axis.key for axis in space}:
        return None
    chosen = {}
    for axis in space:
        match = [c for c in axis.choices if _plain(c) == _plain(params[axis.key])]
        if not match:
            return None
        chosen[axis.key] = match[0]
    return chosen


def load(search) -> None:
    """search.resumable, .finished and .stale from the records finished trials left. A
    record whose parameters no longer make the variant it names (edited, or from another
    layout) is stale: noted with its path, never a twin of another trial; its trial is
    run again (an Optuna study asks its parameters again)."""
    from compress.search.space import variant_key
    from compress.search.trials import RECORD, TRIALS, Trial, variant_of
    stale: dict = {}
    found = finished(search.out, TRIALS, RECORD, Trial, stale)
    for trial in list(found.values()):
        chosen = _chosen(search.space, trial.params)
        made = variant_of(search, chosen, trial.id)[0] if chosen is not None else None
        if made is None or variant_key(made) != trial.variant_key:
            stale[search.out / TRIALS / trial.id / RECORD] = (
                "its parameters no longer make the variant it records")
            del found[trial.id]
        else:
            trial.params = chosen
    search.resumable = found
    search.finished = {t.variant_key: t for t in found.values()}
    search.stale = {path.parent.name: why for path, why in stale.items()}
    for path, why in stale.items():
        search.options["note"](f"search: {path} is not trusted ({why}): that trial is "
                               "run again")
