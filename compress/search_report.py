"""A search's own report: every finished trial's variants side by side, one
recommendation per target from all of them, the Pareto front, and the trials.

A trial's variants keep their ids behind the trial's (`t003/02-quantize`) and their
files' paths run through `trials/t003/`; the baselines (the model as given, exported) are
the same in every trial and appear once, from the first trial that measured them.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from compress import history
from compress.artifacts import Artifact
from compress.decide import CANDIDATE, SHIP
from compress.manifest import build_manifest
from compress.recommend import decision
from compress.report import build_report, write_reports
from profiles import Verdict


class _Merged:
    def __init__(self):
        self.artifacts, self.benchmarks, self.verdicts = [], [], []
        self.models, self.skipped, self.comparisons = [], [], []
        self.shared: set = set()     # ids kept once: the source and the baselines

    def _id(self, trial_id: str, artifact_id: str | None, shared: set) -> str | None:
        if artifact_id is None or artifact_id in shared:
            return artifact_id
        return f"{trial_id}/{artifact_id}"

    def add(self, trial_id: str, report: dict) -> list[str]:
        """A trial's report; returns the ids its own variants got here."""
        shared = {b["artifact"] for b in report["benchmarks"] if b["baseline"]}
        shared |= {s["artifact"] for s in report.get("skipped", []) if s.get("baseline")}
        shared.add(report["artifacts"][0]["id"])             # the source
        first_time = not self.shared
        self.shared |= shared
        mine = []
        for a in report["artifacts"]:
            if a["id"] in shared and not first_time:
                continue
            new = self._id(trial_id, a["id"], shared)
            mine += [] if a["id"] in shared else [new]
            self.artifacts.append(Artifact(**{**a, "id": new, "parent": self._id(
                trial_id, a["parent"], shared), "path": f"trials/{trial_id}/{a['path']}"}))
        keep = (lambda row: first_time or row["artifact"] not in shared)
        rename = (lambda row: {**row, "artifact": self._id(trial_id, row["artifact"], shared)})
        self.benchmarks += [rename(b) for b in report["benchmarks"] if keep(b)]
        self.verdicts += [Verdict(**rename(v)) for v in report["verdicts"] if keep(v)]
        self.models += [rename(m) for m in report["models"] if keep(m)]
        self.comparisons += [rename(b) for b in report.get("engine_baselines", []) if keep(b)]
        return mine


def _trial_rows(search, merged: _Merged) -> list[dict]:
    rows = []
    for trial in sorted(search.trials, key=lambda t: t.id):
        row = {k: v for k, v in asdict(trial).items() if k not in ("variant_key",)}
        row["run_dir"] = f"trials/{trial.id}"
        row["artifacts"] = []
        if trial.state == "complete":
            path = search.out / "trials" / trial.id / "report.json"
            try:
                report = json.loads(path.read_text())
            except (OSError, ValueError):
                row.update(state="failed", error=f"its report is gone ({path})")
            else:
                row["artifacts"] = merged.add(trial.id, report)
                row["_report"] = report
        rows.append(row)
    return rows


def _track(search, report: dict, rows: list[dict]) -> None:
    """The search and each trial (nested) in MLflow, when the pipeline asks for it."""
    from compress import tracking
    pipeline = search.pipeline
    records = [tracking.TrialRecord(r["id"], r["params"], r["state"], r["error"],
                                    r.get("_report"), search.out / r["run_dir"])
               for r in rows if r["state"] in ("complete", "failed")]
    try:
        tracking.log_search(pipeline.tracking, report, search.out, records,
                            base_dir=pipeline.base_dir, run_name=pipeline.name)
    except tracking.TrackingFailed as exc:
        search.options["note"](f"warning: not logged to MLflow: {exc}")


def _passed(recommendations: list[dict], gated: set, strict: bool) -> bool:
    good = (SHIP,) if strict else (SHIP, CANDIDATE)
    return all(r["status"] in good for r in recommendations if r["target"] in gated)


def conclude(search, strategy: str, config_text: str | None):
    """Merge the trials, decide, write runs/<name>/report.*; the runner's Result."""
    from compress.checks import resolve_targets
    from compress.runner import Result
    pipeline = search.pipeline
    targets, gated = resolve_targets(pipeline)
    merged = _Merged()
    trials = _trial_rows(search, merged)
    decided = decision(merged.artifacts, merged.benchmarks,
                       [v.to_dict() for v in merged.verdicts], targets, search.out)
    passed = _passed(decided["recommendations"], gated, search.options["strict"])
    config_text = config_text or pipeline.model_dump_json()
    source = merged.artifacts[0].sha256 if merged.artifacts else ""
    manifest = build_manifest(pipeline, hashlib.sha256(config_text.encode()).hexdigest(),
                              source, targets)
    report = build_report(pipeline, manifest, merged.artifacts, merged.benchmarks,
                          merged.verdicts, merged.models, gated=gated, passed=passed,
                          strict=search.options["strict"], engine_baselines=merged.comparisons)
    report.update(decided)
    report["pipeline"]["config"] = history.config_record(pipeline)
    report["search"] = {"strategy": strategy, "resumed": search.resumed,
                        "space": {a.key: list(a.choices) for a in search.space},
                        "trials": [{k: v for k, v in t.items() if k != "_report"}
                                   for t in trials]}
    write_reports(search.out, report)
    history.archive(search.out, report)
    if pipeline.tracking and pipeline.tracking.mlflow:
        _track(search, report, trials)
    return Result(search.out, merged.artifacts, merged.benchmarks, merged.verdicts, passed,
                  report)
