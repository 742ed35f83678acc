"""Run a validated Pipeline: source -> stages -> baselines -> benchmark -> verdicts ->
report.

Everything that can be checked before work starts (profiles, model, data shapes, data a
stage needs) is checked first (compress.runner.checks), so bad input fails before any file is
written. Each stage's output is checked to load and run before it is committed; a run
that fails in stage N keeps stages 1..N-1 committed, and a re-run resumes from N.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from compress.config.pipeline import Pipeline
from compress.core.artifacts import Artifact
from compress.core.safe_files import expect, make_run_dir
from compress.errors import ConfigError
from compress.measure.fleet import close_fleets
from compress.model.table import model_rows
from compress.report.build import Judged, Measured, build_report, write_reports
from compress.report.fleet import fleet_summaries
from compress.report.recommend import decision
from compress.runner import crash, history
from compress.runner.checks import preflight, resolve_inputs
from compress.runner.context import RunContext
from compress.runner.judging import passed as all_passed, verdicts_of
from compress.runner.lock import RunLock
from compress.runner.manifest import build_manifest
from compress.runner.produce import produce
from compress.runner.progress import Progress
from compress.runner.targets import Targets, apply_target_defaults, resolve_targets
from compress.runner.tracking.mlflow import track_result


@dataclass(frozen=True)
class Result:
    run_dir: Path
    artifacts: list[Artifact]
    benchmarks: list[dict]
    verdicts: list
    passed: bool
    report: dict = field(repr=False)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def recommendation(self, target: str | None = None):
        """What the run recommends for `target` (None: its only target), a
        compress.runner.recommendation.Recommendation; ConfigError for a target it lacks."""
        from compress.runner.recommendation import recommendation
        return recommendation(self.report, self.run_dir, target)

    def ship(self, to, target: str | None = None, strict: bool = False) -> Path:
        """Copy the file recommended for `target` into the folder `to`, with ship.json
        (compress.runner.ship); the copied file's path. A candidate is shipped with a
        warning (`strict`: refused)."""
        import sys
        from compress.runner.ship import ship
        return ship(self.report, self.run_dir / "report.json", to, target, strict,
                    lambda line: print(line, file=sys.stderr))


def _make_run_dir(run_dir: Path) -> None:
    """make_run_dir; a folder the system will not make (under /proc, on a read-only disk)
    is a ConfigError naming it and the system's reason: the user's `output:` to change,
    not a bug (a full disk is NoSpace already)."""
    try:
        make_run_dir(run_dir)
    except OSError as exc:
        failed = f" (at {exc.filename})" if exc.filename and \
            str(exc.filename) != str(run_dir) else ""
        raise ConfigError(f"cannot create the run folder {run_dir}{failed}: "
                          f"{exc.strerror or exc}; choose another `output:` folder (or "
                          "--output)", field="output") from None


def _drop_empty_run_dir(ctx: RunContext, created_run_dir: bool) -> None:
    """A failed run keeps the stages it finished (complete and content-addressed: a re-run
    resumes after them) but leaves no run directory behind that holds nothing else."""
    if created_run_dir and ctx.run_dir.is_dir() and \
            all(p.name == ".lock" for p in ctx.run_dir.iterdir()):
        shutil.rmtree(ctx.run_dir, ignore_errors=True)


def _nothing_in_the_way(run_dir: Path) -> None:
    """What a run writes at its end (its reports, its history folder), checked before any
    work: a link or a folder planted there fails the run now, not after its stages."""
    for name in history.REPORT_FILES:
        expect(run_dir / name)
    expect(run_dir / history.HISTORY, folder=True)


def _report(ctx: RunContext, produced: tuple, gated: set, strict: bool,
            config_text: str | None) -> Result:
    artifacts, benchmarks, skipped, comparisons = produced
    pipeline = ctx.pipeline
    models = model_rows(ctx, artifacts, benchmarks)
    verdicts = verdicts_of(benchmarks, skipped, artifacts, ctx.targets)
    decided = decision(artifacts, benchmarks, [v.to_dict() for v in verdicts],
                       ctx.targets, ctx.run_dir, skipped)
    passed = all_passed(decided["recommendations"], gated, strict)
    config_text = config_text or pipeline.model_dump_json()
    manifest = build_manifest(pipeline, hashlib.sha256(config_text.encode()).hexdigest(),
                              artifacts[0].sha256, ctx.targets, [*benchmarks, *comparisons])
    report = build_report(pipeline, manifest,
                          Measured(artifacts, models, benchmarks, skipped, comparisons),
                          Judged(verdicts, gated, passed, strict), ctx.cleanup_warnings)
    report.update(decided)
    report["pipeline"]["config"] = history.config_record(pipeline)
    if pipeline.data.text is not None:   # the token ids every variant was scored on
        report["text"] = ctx.lm_text().record()
    report["fleets"] = fleet_summaries(ctx.fleets)
    write_reports(ctx.run_dir, report, page=not ctx.trial)
    if not ctx.trial:   # a trial's history is its search's
        history.archive(ctx.run_dir, report)
    return Result(ctx.run_dir, artifacts, benchmarks, verdicts, passed, report)


@dataclass(frozen=True)
class TrialRun:
    """What a search hands the run of one of its trials: the targets it resolved (with
    the trial's own threads and engines), the folder of stages shared between its runs,
    its memo of measurements, and `compress_only`: make the stages and baselines (into
    the stage cache) and stop, no device reached, no report (a trial's Ray task)."""
    targets: Targets
    stage_cache: Path
    measured: dict
    compress_only: bool = False


def run_pipeline(pipeline: Pipeline, *, force: bool = False, strict: bool = False,
                 quiet: bool = False, config_text: str | None = None,
                 trial: TrialRun | None = None) -> Result:
    """`trial`: a search's trial (its targets, stage cache and memo); otherwise the
    targets are resolved here and the stage cache is `.stages` in the output folder."""
    crash.set_run_dir(None)  # a crash before this run's folder exists is not logged in the last
    targets = trial.targets if trial else resolve_targets(pipeline)
    pipeline = resolve_inputs(apply_target_defaults(pipeline, targets.pairs))
    run_dir = pipeline.run_dir
    compress_only = bool(trial and trial.compress_only)
    with Progress(quiet=quiet) as progress:
        ctx = RunContext(pipeline, progress, run_dir, targets=list(targets.pairs), force=force,
                         measured=trial.measured if trial else None, trial=trial is not None,
                         compress_only=compress_only,
                         stage_cache=trial.stage_cache if trial else
                         pipeline.resolve(pipeline.output) / ".stages")
        progress.note(f"{pipeline.name}: checking the model, data and profiles")
        preflight(ctx)
        created_run_dir = not os.path.lexists(run_dir)
        try:   # the output folder may be reached through a link; the run folder may not
            _make_run_dir(run_dir)
            lock = RunLock(run_dir)
            lock.acquire(progress.note)
        except BaseException:
            close_fleets(ctx.fleets)
            raise
        crash.set_run_dir(run_dir)  # kept after a failure: the CLI logs a crash there
        try:
            _nothing_in_the_way(run_dir)
            produced = produce(ctx)
            if compress_only:
                crash.set_run_dir(None)
                return Result(run_dir, produced[0], [], [], True, {})
            result = _report(ctx, produced, targets.gated, strict, config_text)
            track_result(pipeline, result, progress.note)
            crash.set_run_dir(None)
            return result
        except BaseException:  # an error, a bug or Ctrl-C: no report from this run
            _drop_empty_run_dir(ctx, created_run_dir)
            # no report will carry them: what a device kept is said now
            for warning in ctx.cleanup_warnings + close_fleets(ctx.fleets):
                progress.note(f"warning: {warning}")
            raise
        finally:
            lock.release()
