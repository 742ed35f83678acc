"""What `compress runs` and `compress compare` read of a report.json, typed and checked
before any of it is used: a report edited by hand, cut short or written by something
else is refused with the file and the field, never half-read.

The file is read only when it is a regular file of at most MAX_REPORT_BYTES (a FIFO
would block, a link to /dev/zero never end: compress.core.bounded_read), and parsed by
pydantic's JSON parser, whose nesting limit turns a document nested 100,000 deep into
an error, not a RecursionError.
The types are what compress/report/build.py writes; a verdict row is the writer's own
record (profiles.Verdict). Fields the readers do not use are kept as they are.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, ValidationError

from compress.core.bounded_read import NotRegular, read_regular
from profiles import Verdict

MAX_REPORT_BYTES = 64 * 2**20


class NotAReport(Exception):
    """Why a file is not a report.json a run wrote (the reader turns it into its error)."""


class _Part(BaseModel):
    # strict: a string where the writer puts a number is not read as one
    model_config = ConfigDict(strict=True, extra="allow")


class PipelinePart(_Part):
    config_sha256: str
    name: Optional[str] = None
    config: Optional[dict[str, Any]] = None


class ManifestPart(_Part):
    packages: dict[str, Any]
    created: str = "?"


class Latency(_Part):
    p90: float


class MetricPart(_Part):
    value: Optional[float] = None
    drop: Optional[float] = None


class BenchmarkPart(_Part):
    artifact: str
    target: str
    latency_ms: Latency
    size_bytes: int
    peak_memory_mb: Optional[float] = None
    metric: Optional[MetricPart] = None


class RecommendationPart(_Part):
    target: str
    artifact: Optional[str] = None
    status: Optional[str] = None
    summary: str = ""


class ReportView(_Part):
    """The parts of report.json that `runs` and `compare` read."""
    pipeline: PipelinePart
    manifest: ManifestPart
    passed: bool
    gated_targets: list[str] = []
    benchmarks: list[BenchmarkPart] = []
    verdicts: list[Verdict] = []
    recommendations: list[RecommendationPart] = []


def first_error(exc: ValidationError) -> str:
    """A record's first wrong field and what is wrong with it, never its contents."""
    error = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(map(str, error["loc"]))
    return f"field {where}: {error['msg']}" if where else error["msg"]


def parse(data: bytes, schema: type[ReportView] = ReportView) -> ReportView:
    """The report's typed view (`schema`: ReportView or a reader's fuller one, such as a
    search's trial report); NotAReport naming the first field that is wrong."""
    try:
        return schema.model_validate_json(data)
    except ValidationError as exc:
        raise NotAReport(first_error(exc)) from None


def read_bytes(path: Path) -> bytes:
    """The report's bytes: OSError (it cannot be opened) or NotAReport (not a regular
    file, or larger than MAX_REPORT_BYTES)."""
    try:
        return read_regular(path, MAX_REPORT_BYTES)
    except NotRegular as exc:
        raise NotAReport(str(exc)) from None


def read_report(path: Path) -> ReportView:
    """The report at `path`, typed: raises OSError (it cannot be opened) or NotAReport."""
    return parse(read_bytes(path))
