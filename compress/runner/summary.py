"""`compress run --json`: a run's outcome as one JSON document on stdout, for a CI step or
a script to read (passed, exit code, run folder, per target what to ship, the verdicts
counted), with every line meant for a person sent to stderr instead."""
from __future__ import annotations

import contextlib
import json
import os
import sys
from collections import Counter
from typing import Callable, Iterator

from compress.errors import CompressError, NoSpace

# what a recommendation says per target, under the names report.json gives them
RECOMMENDATION_FIELDS = ("target", "status", "artifact", "path", "latency_p90_ms",
                         "model_size_mb", "drop")


def _recommendation(rec: dict, report: dict) -> dict:
    """A target's line of the document: its answer (shippable, candidate, none), whether
    it decides the exit code, and the recommendation's fields."""
    from compress.report.words import status_of
    return {"answer": status_of(rec), "gated": rec["target"] in report.get("gated_targets", ()),
            **{key: rec.get(key) for key in RECOMMENDATION_FIELDS}}


def summary_document(result) -> dict:
    """The run's outcome (compress.run's Result) as the document `run --json` prints."""
    report = result.report
    counts = Counter(v.get("status") for v in report.get("verdicts", ()))
    return {"passed": result.passed, "exit_code": result.exit_code,
            "run_dir": str(result.run_dir.resolve()),
            "report": str(result.run_dir.resolve() / "report.json"),
            "recommendations": [_recommendation(rec, report)
                                for rec in report.get("recommendations", ())],
            "verdicts": dict(sorted(counts.items(), key=lambda kv: str(kv[0])))}


def error_document(error: Exception) -> dict:
    """A run stopped by bad input (a CompressError, exit 2): the document says so too, so
    that whatever reads stdout reads JSON whatever happened."""
    return {"passed": False, "exit_code": getattr(error, "exit_code", 2), "run_dir": None,
            "error": str(error)}


@contextlib.contextmanager
def human_text_to_stderr() -> Iterator[None]:
    """Everything written to stdout inside (our lines, a library's, a native one's
    through file descriptor 1) goes to stderr; stdout is left for the JSON document."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        # sys.stdout too: it may not write through descriptor 1 (a caller's own stream)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def run_as_json(run: Callable) -> int:
    """`run --json`: `run()` (the run, its lines for a person printed: compress.run's
    Result) with every such line on stderr, then one JSON document on stdout, also when
    bad input stops it (its message under `error`, then raised for the CLI to say it
    and exit 2). A bug prints no document: exit 3, its crash log named on stderr."""
    result = stopped = None
    with human_text_to_stderr():
        try:
            result = run()
        except Exception as exc:   # said below, then raised again for its exit code
            # a full disk said once: the document and the CLI's line name the same free space
            stopped = NoSpace.found_in(exc) or exc
    if stopped is not None and not isinstance(stopped, CompressError):
        raise stopped
    document = summary_document(result) if stopped is None else error_document(stopped)
    print(json.dumps(document, indent=2), flush=True)
    if stopped is not None:
        raise stopped
    return result.exit_code
