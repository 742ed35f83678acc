"""A finished trial's report.json as the search's own report merges it: read only when it
is a regular file of a sane size (a FIFO planted there would block the search's last step,
a link to /dev/zero fill its memory: compress.core.bounded_read), and checked to hold every
field the merge reads, of the type the run wrote, so that a report cut short, edited by
hand or replaced is one trial left out with the reason, never a crash of the search.

The schema is the one `compress runs` reads (compress.runner.report_schema) with the rows
the merge takes apart: each artifact as the run recorded it (read back as an Artifact),
each measurement's baseline flag, the verdicts as profiles.Verdict takes them, and the
model and engine comparison rows, every row naming an artifact the report lists.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from compress.core.bounded_read import NotRegular, read_regular
from profiles import Verdict
from compress.runner.report_schema import (MAX_REPORT_BYTES, BenchmarkPart, NotAReport,
                                           ReportView)

__all__ = ["NotAReport", "read_trial_report"]


class _Exact(BaseModel):
    # a row read back as a dataclass (Artifact, Verdict): an unknown key would not fit it
    model_config = ConfigDict(strict=True, extra="forbid")


class _ArtifactRow(_Exact):
    id: str
    format: str
    precision: str
    stage: str
    parent: Optional[str]
    path: str
    size_bytes: int
    sha256: str
    meta: dict[str, Any] = {}


class _Row(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")
    artifact: str


class _Measured(BenchmarkPart):
    baseline: bool


class TrialReport(ReportView):
    artifacts: list[_ArtifactRow] = Field(min_length=1)   # the first is the source
    benchmarks: list[_Measured] = []
    verdicts: list[Verdict] = []   # the writer's own record
    models: list[_Row] = []
    engine_baselines: list[_Row] = []


def _parsed(data: bytes) -> TrialReport:
    """pydantic's JSON parser (its nesting limit makes a document nested 100,000 deep an
    error, not a RecursionError); NotAReport naming the first wrong field, never its value."""
    try:
        return TrialReport.model_validate_json(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(map(str, error["loc"]))
        raise NotAReport(f"field {where}: {error['msg']}" if where else error["msg"]) \
            from None


def read_trial_report(path: Path) -> dict:
    """The trial's report as the run wrote it; OSError (it cannot be opened) or NotAReport
    naming what is wrong (not a regular file, too large, a field missing or mistyped, a
    row naming an artifact the report does not list)."""
    try:
        data = read_regular(path, MAX_REPORT_BYTES)
    except NotRegular as exc:
        raise NotAReport(str(exc)) from None
    view = _parsed(data)
    listed = {a.id for a in view.artifacts}
    for table in ("benchmarks", "verdicts", "models", "engine_baselines"):
        strays = [row.artifact for row in getattr(view, table) if row.artifact not in listed]
        if strays:
            raise NotAReport(f"field {table}: names artifact {strays[0]!r}, which the "
                             "report's artifacts do not list")
    # the validated document, whole: the merge and the decision read more of each row
    return json.loads(data)
