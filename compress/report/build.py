"""report.json (for machines and CI gates) and report.md (for people)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from compress.core.safe_files import expect, write_set
from compress.report.gains import gains
from compress.report.md import render_markdown
from compress.report.notes import mark_noisy, unmeasured_reasons
from profiles import AT_LEAST, NO_METER
from profiles.check import DID_NOT_RUN

__all__ = ["Judged", "Measured", "build_report", "render_markdown", "write_reports"]


@dataclass(frozen=True)
class Measured:
    """What a run made and measured: every artifact (the source first), the model rows,
    the measurements, the artifact x target pairs not measured (with the reason) and the
    baselines' runs on the targets' other engines."""
    artifacts: list
    models: list[dict]
    benchmarks: list[dict]
    skipped: list[dict] = ()
    engine_baselines: list[dict] = ()


@dataclass(frozen=True)
class Judged:
    """The verdicts and what they decide: the gated targets, whether the run passed, and
    whether --strict counted an unmeasured budget as a failure."""
    verdicts: list
    gated: frozenset
    passed: bool
    strict: bool


def _missed(verdict) -> str:
    """'accuracy_drop (0.0156 over 0.01)': a missed budget with its value and limit, a
    minimum (decode tokens/s) said to be missed from under it."""
    if verdict.value is None:   # its runner did not run there: the reason is said apart
        return verdict.metric
    side = "under" if verdict.metric in AT_LEAST else "over"
    return f"{verdict.metric} ({verdict.value:.4g} {side} {verdict.budget:g})"


def _fits(verdicts, benchmarks: list[dict]) -> list[dict]:
    rows = []
    for bench in benchmarks:
        mine = [v for v in verdicts if v.artifact == bench["artifact"] and v.target == bench["target"]]
        statuses = {v.status for v in mine}
        failed = [v for v in mine if v.status == "fail"]
        if failed:
            answer = "no: over budget on " + ", ".join(map(_missed, failed))
        elif "off-target" in statuses:
            answer = "unknown: measured off the device (" + next(
                v.reason for v in mine if v.status == "off-target") + ")"
        elif "unmeasured" in statuses:
            answer = "yes, except unmeasured: " + ", ".join(
                v.metric for v in mine if v.status == "unmeasured")
        else:
            answer = "yes" if mine else "no budget"
        unmetered = [v.metric for v in mine if v.status == NO_METER]
        if unmetered and not failed:  # judged only where a meter is (power.required: false)
            answer += f" ({', '.join(unmetered)}: no meter here)"
        rows.append({"artifact": bench["artifact"], "target": bench["target"],
                     "baseline": bench["baseline"], "fits": answer})
    return rows


def build_report(pipeline, manifest: dict, measured: Measured, judged: Judged,
                 cleanup_warnings: list[str] = ()) -> dict:
    """report.json's content."""
    benchmarks, verdicts = measured.benchmarks, judged.verdicts
    # an unmeasured pair's reason is in unmeasured_reasons, once per target; a pair whose
    # runner was killed there did not fit (profiles.check.did_not_run_verdicts)
    fits = _fits(verdicts, benchmarks) + [
        {"artifact": s["artifact"], "target": s["target"], "baseline": s.get("baseline", False),
         "fits": f"no: {DID_NOT_RUN}: {s['reason']}" if s.get("died") else
         "unknown, unmeasured" if s.get("unmeasured") else "not measured: " + s["reason"]}
        for s in measured.skipped]
    mark_noisy([*benchmarks, *measured.engine_baselines])
    return {
        "pipeline": {"name": pipeline.name, "config_sha256": manifest["config_sha256"]},
        "manifest": manifest,
        "artifacts": [a.to_dict() for a in measured.artifacts],
        "models": measured.models,
        "benchmarks": benchmarks,
        "engine_baselines": list(measured.engine_baselines),
        "gains": gains(benchmarks, measured.engine_baselines),
        "verdicts": [v.to_dict() for v in verdicts],
        "fits": fits,
        "unmeasured_reasons": unmeasured_reasons([v.to_dict() for v in verdicts]),
        "gated_targets": sorted(judged.gated),
        "strict": judged.strict,
        "passed": judged.passed,
        "cleanup_warnings": list(cleanup_warnings),
    }


def write_reports(run_dir: Path, report: dict, page: bool = True) -> None:
    """report.json, manifest.json, report.md and (`page`) report.html, as one set: each
    written whole to a temporary file first and renamed into place only when all are,
    report.json (what says a run finished) last, none through a link
    (compress.core.safe_files); on a full disk, none of them is new. A search's trials
    leave the page to the search's own report, which shows them all."""
    files = [(run_dir / "manifest.json", _json(report["manifest"])),
             (run_dir / "report.md", render_markdown(report))]
    html = _page(report) if page else None
    if html is not None:
        files.append((run_dir / "report.html", html))
    elif page:
        # plotly is the optional report extra: report.json and report.md stand on their
        # own, and a page left by an earlier run would contradict them
        expect(run_dir / "report.html")
        (run_dir / "report.html").unlink(missing_ok=True)
    write_set(files + [(run_dir / "report.json", _json(report))])


def _json(data) -> str:
    return json.dumps(data, indent=2, default=str)


def _page(report: dict) -> str | None:
    """report.html's text; None without the report extra (plotly)."""
    from compress.errors import MissingDependency
    try:
        from compress.report.html import render_html
        return render_html(report)
    except MissingDependency:
        return None
