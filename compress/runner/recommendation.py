"""A run's recommendation for one target, typed (Result.recommendation, `compress ship`):
read from its report's `recommendations` entry, the file found where the run left it.
"""
from __future__ import annotations

import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from compress.errors import ConfigError

SHIPPABLE = ("ship", "candidate")


@dataclass(frozen=True)
class Recommendation:
    """What a run recommends for one target (its report's `recommendations` entry),
    typed. Where nothing is recommended (status 'nothing fits' or 'unmeasured') the file's
    fields are None and `closest_miss` says which variant came nearest."""
    target: str
    status: str
    artifact: Optional[str]
    path: Optional[Path]            # absolute
    format: Optional[str]
    precision: Optional[str]
    engine: Optional[str]
    threads: Optional[int]
    latency_p90_ms: Optional[float]
    model_size_mb: Optional[float]
    peak_memory_mb: Optional[float]
    metric: Optional[dict]
    drop: Optional[float]
    feeding: Optional[dict]
    measured_on_device: Optional[bool]
    off_target_reason: Optional[str] = None
    closest_miss: Optional[dict] = None
    why: str = ""


def typed_as(value, kind):
    """`value` if it is of `kind` (a report read back is typed only where `runs` reads it)."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value if isinstance(value, kind) and not (kind is int and
                                                       isinstance(value, bool)) else None


def artifact_record(report: dict, artifact: Optional[str]) -> dict:
    return next((a for a in report.get("artifacts") or () if isinstance(a, dict)
                 and a.get("id") == artifact), {})


def _file_of(report: dict, run_dir: Path, rec: dict) -> Optional[Path]:
    """The recommended file: in the report's own folder where the run's artifact list puts
    it (a run folder moved or copied elsewhere), else where the recommendation says."""
    stored = typed_as(artifact_record(report, rec.get("artifact")).get("path"), str)
    if stored and not Path(stored).is_absolute() and ".." not in Path(stored).parts \
            and os.path.lexists(run_dir / stored):
        return (run_dir / stored).absolute()
    path = typed_as(rec.get("path"), str)
    return Path(path) if path else None


def _kind(annotation) -> type:
    """The type a field holds when set: Optional[float] -> float."""
    return next(a for a in (typing.get_args(annotation) or (annotation,)) if a is not type(None))


# field -> the type its value is read as; the file (`path`) is found by _file_of
_KINDS = {name: _kind(hint) for name, hint in typing.get_type_hints(Recommendation).items()
          if name != "path"}


def _typed(report: dict, run_dir: Path, rec: dict) -> Recommendation:
    values = {name: typed_as(rec.get(name), kind) for name, kind in _KINDS.items()}
    return Recommendation(**{
        **values, "status": values["status"] or "unmeasured", "why": values["why"] or "",
        "path": _file_of(report, run_dir, rec) if rec.get("status") in SHIPPABLE else None})


def recommendation(report: dict, run_dir: Path, target: Optional[str] = None) -> Recommendation:
    """The run's recommendation for `target` (None: its only target); a ConfigError naming
    the run's targets when it has no such target, or several and none was named."""
    recs = [r for r in report.get("recommendations") or ()
            if isinstance(r, dict) and isinstance(r.get("target"), str)]
    names = ", ".join(r["target"] for r in recs) or "none"
    if target is None:
        if len(recs) == 1:
            return _typed(report, Path(run_dir), recs[0])
        raise ConfigError(f"the run in {run_dir} has {len(recs)} targets ({names}): name "
                          "the one to ship (--target, or target= in Python)")
    for rec in recs:
        if rec["target"] == target:
            return _typed(report, Path(run_dir), rec)
    raise ConfigError(f"'{target}' is not a target of the run in {run_dir}; its targets: "
                      f"{names}")
