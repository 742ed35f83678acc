"""A finished trial's report.json as the search's own report merges it: read only when it
is a regular file of a sane size (a FIFO planted there would block the search's last step,
a link to /dev/zero fill its memory: compress.core.bounded_read), and checked to hold every
field the merge reads, of the type the run wrote, so that a report cut short, edited by
hand or replaced is one trial left out with the reason, never a crash of the search.

The schema is the one `compress runs` reads (compress.runner.report_schema) with the rows
the merge takes apart: each artifact as the run recorded it (read back as an Artifact),
each measurement's baseline flag, each verdict as profiles.Verdict takes it (both rows
checked against the dataclass itself, no key more), and the model and engine comparison
rows, every row naming an artifact the report lists.
"""
from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from compress.core.artifacts import Artifact
from compress.runner.report_schema import (BenchmarkPart, NotAReport, ReportView, parse,
                                           read_bytes)
from profiles import Verdict

__all__ = ["NotAReport", "read_trial_report"]


def _exactly(record: type) -> type:
    """The record's own dataclass, validated as pydantic does a model: strictly, and with
    no key it does not have (the merge rebuilds each row as `record(**row)`, where an
    unknown key would be a TypeError). A subclass: `record` itself stays as it is."""
    return pydantic_dataclass(record, frozen=True,
                              config=ConfigDict(strict=True, extra="forbid"))


_ArtifactRow, _VerdictRow = _exactly(Artifact), _exactly(Verdict)


class _Row(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")
    artifact: str


class _Measured(BenchmarkPart):
    baseline: bool


class TrialReport(ReportView):
    artifacts: list[_ArtifactRow] = Field(min_length=1)   # the first is the source
    benchmarks: list[_Measured] = []
    verdicts: list[_VerdictRow] = []
    models: list[_Row] = []
    engine_baselines: list[_Row] = []


def read_trial_report(path: Path) -> dict:
    """The trial's report as the run wrote it; OSError (it cannot be opened) or NotAReport
    naming what is wrong (not a regular file, too large, a field missing or mistyped, a
    row naming an artifact the report does not list)."""
    data = read_bytes(path)
    view = parse(data, TrialReport)
    listed = {a.id for a in view.artifacts}
    for table in ("benchmarks", "verdicts", "models", "engine_baselines"):
        strays = [row.artifact for row in getattr(view, table) if row.artifact not in listed]
        if strays:
            raise NotAReport(f"field {table}: names artifact {strays[0]!r}, which the "
                             "report's artifacts do not list")
    # the validated document, whole: the merge and the decision read more of each row
    return json.loads(data)
