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

from compress.runner import history
from compress.runner.judging import passed as all_passed
from compress.core.artifacts import Artifact
from compress.runner.manifest import build_manifest
from compress.report.recommend import decision
from compress.report.build import Judged, Measured, build_report, write_reports
from compress.search.trial_report import NotAReport, read_trial_report
from compress.search.trials import COMPLETE, SKIPPED, TRIALS
from profiles import Verdict


class _Merged:
    """The trials' reports as one. A file two trials both made (the same bytes, measured
    with the same target settings) is one variant, under the id of the first trial that
    made it; the source and the baselines keep their plain ids where no other file has
    taken them (a baseline exported differently in another trial gets that trial's)."""

    def __init__(self):
        self.artifacts, self.benchmarks, self.verdicts = [], [], []
        self.models, self.comparisons = [], []
        self.by_content: dict[tuple, str] = {}    # (sha256, target settings) -> merged id
        self.taken: set = set()
        self.rows: set = set()                    # (table, merged id, target, budget)

    def _name(self, trial_id: str, artifact: dict, plain: bool) -> str:
        name = artifact["id"] if plain and artifact["id"] not in self.taken \
            else f"{trial_id}/{artifact['id']}"
        self.taken.add(name)
        return name

    def _ids(self, trial_id: str, report: dict, settings: str) -> tuple[dict, list]:
        """{the trial's id: merged id}, and the artifacts first seen here."""
        plain = {b["artifact"] for b in report["benchmarks"] if b["baseline"]}
        plain.add(report["artifacts"][0]["id"])               # the source
        ids, new = {}, []
        for a in report["artifacts"]:
            key = (a["sha256"], settings)
            if key not in self.by_content:
                self.by_content[key] = self._name(trial_id, a, a["id"] in plain)
                new.append(a)
            ids[a["id"]] = self.by_content[key]
        return ids, new

    def _rows(self, table: str, rows: list, ids: dict, extra: str = "") -> list:
        kept = []
        for row in rows:
            key = (table, ids[row["artifact"]], row.get("target"), row.get(extra))
            if key not in self.rows:
                self.rows.add(key)
                kept.append({**row, "artifact": ids[row["artifact"]]})
        return kept

    def add(self, trial_id: str, report: dict, settings: str) -> list[str]:
        """A trial's report (`settings`: its choices of target settings, which make the
        same file another variant); returns the merged ids of its variants."""
        ids, new = self._ids(trial_id, report, settings)
        for a in new:
            self.artifacts.append(Artifact(**{**a, "id": ids[a["id"]],
                                              "parent": ids.get(a["parent"], a["parent"]),
                                              "path": f"trials/{trial_id}/{a['path']}"}))
        self.benchmarks += self._rows("bench", report["benchmarks"], ids)
        self.verdicts += [Verdict(**v) for v in
                          self._rows("verdict", report["verdicts"], ids, "metric")]
        self.models += self._rows("model", report["models"], ids)
        self.comparisons += self._rows("comparison", report.get("engine_baselines", []),
                                       ids, "engine")
        judged = {row["artifact"] for row in [*report["benchmarks"], *report["verdicts"]]
                  if not row.get("baseline", False)}
        baselines = {b["artifact"] for b in report["benchmarks"] if b["baseline"]}
        return sorted({ids[a] for a in judged - baselines})   # what the trial measured


def _trial_rows(search, merged: _Merged) -> list[dict]:
    rows = []
    for trial in sorted(search.trials, key=lambda t: t.id):
        row = {k: v for k, v in asdict(trial).items() if k not in ("variant_key",)}
        row["run_dir"] = f"trials/{trial.id}"
        row["artifacts"] = []
        if trial.state == COMPLETE:
            path = search.out / TRIALS / trial.id / "report.json"
            try:
                report = read_trial_report(path)
            except (OSError, NotAReport) as exc:
                why = exc.strerror if isinstance(exc, OSError) else str(exc)
                row.update(state=SKIPPED, error=f"its report {path} cannot be read ({why}); "
                           f"its variants are left out: delete {path.parent} and run the "
                           "search again to redo it")
            else:
                settings = json.dumps({k: v for k, v in trial.params.items()
                                       if k.startswith("targets.")}, sort_keys=True)
                row["artifacts"] = merged.add(trial.id, report, settings)
                row["_report"] = report
        rows.append(row)
    return rows


def _track(search, report: dict, rows: list[dict]) -> None:
    """The search and each trial (nested) in MLflow, when the pipeline asks for it."""
    from compress.runner.tracking import mlflow as tracking
    pipeline = search.pipeline
    records = [tracking.TrialRecord(r["id"], r["params"], r["state"], r["error"],
                                    r.get("_report"), search.out / r["run_dir"])
               for r in rows if r["state"] in ("complete", "failed")]
    try:
        tracking.log_search(pipeline.tracking, report, search.out, records,
                            base_dir=pipeline.base_dir, run_name=pipeline.name)
    except tracking.TrackingFailed as exc:
        search.options["note"](f"warning: not logged to MLflow: {exc}")


def conclude(search, strategy: str, config_text: str | None):
    """Merge the trials, decide, write runs/<name>/report.*; the runner's Result."""
    from compress.runner.run import Result
    pipeline = search.pipeline
    targets, gated = search.targets.pairs, search.targets.gated
    merged = _Merged()
    trials = _trial_rows(search, merged)
    decided = decision(merged.artifacts, merged.benchmarks,
                       [v.to_dict() for v in merged.verdicts], targets, search.out)
    passed = all_passed(decided["recommendations"], gated, search.options["strict"])
    config_text = config_text or pipeline.model_dump_json()
    source = merged.artifacts[0].sha256 if merged.artifacts else ""
    manifest = build_manifest(pipeline, hashlib.sha256(config_text.encode()).hexdigest(),
                              source, targets, [*merged.benchmarks, *merged.comparisons])
    report = build_report(pipeline, manifest,
                          Measured(merged.artifacts, merged.models, merged.benchmarks,
                                   engine_baselines=merged.comparisons),
                          Judged(merged.verdicts, gated, passed, search.options["strict"]))
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
