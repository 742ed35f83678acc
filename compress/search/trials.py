"""One trial of a search: a variant of the pipeline (one combination of choices) run as a
pipeline of its own in `runs/<name>/trials/<id>/`, skipped where it cannot be made, or
a duplicate of a finished twin; what a search shares between its trials (Search) and
the objectives a strategy reads from a trial's report.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from compress.core.artifacts import write_json_atomic
from compress.core.safe_files import make_dir
from compress.errors import CompressError, StageError
from compress.report.decide import over_ratio
from compress.runner.targets import Targets
from compress.search.space import variant, variant_key

TRIALS, STUDY_DB, RECORD = "trials", "search.db", "trial.json"
OPTUNA_DEFAULT_TRIALS = 20
COMPLETE, FAILED, DUPLICATE, SKIPPED = "complete", "failed", "duplicate", "skipped"
# An objective for a trial with no timed variant on a target: worse than any real one.
UNTIMED = 1e6


@dataclass
class Trial:
    id: str
    params: dict
    state: str
    error: Optional[str] = None
    seconds: float = 0.0
    variant_key: Optional[str] = None
    same_as: Optional[str] = None           # a duplicate's finished twin
    objectives: Optional[list[float]] = None   # [worst p90 / budget over targets, best drop]
    constraints: list[float] = field(default_factory=list)   # <= 0: a target's budgets held


@dataclass
class Search:
    """What every trial of one search shares."""
    pipeline: object
    space: list
    out: Path
    options: dict                           # force, strict, quiet for each trial's run
    finished: dict = field(default_factory=dict)   # variant key -> Trial (complete)
    resumable: dict = field(default_factory=dict)  # trial id -> Trial from a past session
    stale: dict = field(default_factory=dict)      # trial id -> why its record is not trusted
    trials: list = field(default_factory=list)
    memo: dict = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    resumed: int = 0
    in_flight: int = 0                      # trials an executor is compressing now
    targets: Optional[Targets] = None       # resolved once for the search (runner.targets)


def _objectives(report: dict) -> tuple[list, list]:
    """[worst over the targets timed of the best p90 / latency budget, best metric drop],
    and per target the smallest overrun of a budget by a variant of this trial (<= 0: one
    meets them all; a variant not timed there is judged on its size and metric alone)."""
    mine = [b for b in report["benchmarks"] if not b["baseline"]]
    baselines = {b["artifact"] for b in report["benchmarks"] if b["baseline"]}
    ratios, constraints = [], []
    for target, budget in report.get("budgets", {}).items():
        timed = [b["latency_ms"]["p90"] for b in mine if b["target"] == target]
        if timed:
            ratios.append(min(timed) / (budget.get("latency_p90_ms") or 1.0))
        rows = [v for v in report["verdicts"] if v["target"] == target
                and v["artifact"] not in baselines and v["value"] is not None]
        overruns = {}
        for v in rows:   # a finite number: the sampler cannot weigh infinity
            overruns[v["artifact"]] = max(overruns.get(v["artifact"], -1.0),
                                          min(over_ratio(v["value"], v["budget"]), UNTIMED))
        constraints.append(min(overruns.values(), default=1.0))
    drops = [b["metric"]["drop"] for b in mine if b.get("metric")]
    return [max(ratios, default=UNTIMED), min(drops, default=0.0)], constraints


def _record(search: Search, trial: Trial) -> Trial:
    folder = make_dir(make_dir(search.out / TRIALS) / trial.id)   # never through a link
    write_json_atomic(folder / RECORD, asdict(trial))
    search.trials.append(trial)
    if trial.variant_key and trial.state in (COMPLETE, FAILED):   # twins in this session
        search.finished[trial.variant_key] = trial
    return trial


def variant_of(search: Search, params: dict, trial_id: str):
    """(the trial's pipeline, None) or (None, why it cannot be made)."""
    update = {"name": trial_id, "output": str(search.out / TRIALS), "tracking": None}
    made, why = variant(search.pipeline, search.space, params, **update)
    if made is None:
        return None, why
    last = made.stages[-1]
    if last.type == "benchmark":   # cheap checks first: see compress.measure.screen
        made = made.model_copy(update={"stages": made.stages[:-1] + (
            last.model_copy(update={"skip_over_budget": True}),)})
    return made, None


@dataclass
class Proposal:
    """A combination to try, from a strategy; `told` hands its trial back (Optuna)."""
    params: dict
    trial_id: str
    position: str = ""
    told: Callable[[Trial], None] = lambda trial: None


@dataclass
class Prepared:
    """A proposal made into a pipeline of its own, not a skip nor a duplicate."""
    proposal: Proposal
    made: object
    key: str


def prepare_trial(search: Search, proposal: Proposal):
    """A Trial when there is nothing to run (it cannot be made, or a finished trial made
    the same variant), else Prepared."""
    made, why = variant_of(search, proposal.params, proposal.trial_id)
    for key in [k for k, t in search.finished.items() if t.id == proposal.trial_id]:
        del search.finished[key]   # its folder is made again: a twin of nothing now
    if made is None:
        return _record(search, Trial(proposal.trial_id, proposal.params, SKIPPED, error=why))
    key = variant_key(made)
    twin = search.finished.get(key)
    if twin is not None:
        search.trials.append(Trial(proposal.trial_id, proposal.params, DUPLICATE,
                                   variant_key=key, same_as=twin.id,
                                   objectives=twin.objectives, constraints=twin.constraints,
                                   error=twin.error))
        return search.trials[-1]
    return Prepared(proposal, made, key)


def finish_trial(search: Search, prepared: Prepared, compressed: Optional[dict] = None) -> Trial:
    """Run the variant's pipeline here and record it. `compressed`: what an executor that
    made its stages elsewhere answered (executors.ray_task): they are reused from the
    stage cache, or the trial is recorded as failed with the executor's message."""
    from compress.runner.run import TrialRun, run_pipeline
    proposal, note = prepared.proposal, search.options["note"]
    elapsed = time.monotonic() - search.started
    note(f"trial {proposal.trial_id} ({proposal.position}{elapsed:.0f} s into the search): "
         f"{', '.join(f'{k}={v}' for k, v in proposal.params.items())}")
    started = time.perf_counter()
    try:
        if compressed is not None and "message" in compressed:
            raise (_Failed if compressed["stage_error"] else CompressError)(compressed["message"])
        # what an executor made is reused, even when forced: it was forced there
        trial = TrialRun(search.targets.for_variant(prepared.made),
                         stage_cache_of(search.pipeline), search.memo)
        result = run_pipeline(prepared.made, force=search.options["force"] and not compressed,
                              strict=search.options["strict"], quiet=search.options["quiet"],
                              trial=trial)
    except CompressError as exc:   # this variant cannot be made or measured: the others can
        if not isinstance(exc, (StageError, _Failed)) and not any(
                t.state == COMPLETE for t in search.trials):
            raise   # before any stage of the first trial: the pipeline itself is wrong
        note(f"trial {proposal.trial_id} failed: {exc}")
        return _record(search, Trial(proposal.trial_id, proposal.params, FAILED, str(exc),
                                     round(time.perf_counter() - started, 3), prepared.key))
    _check_same_files(note, proposal.trial_id, compressed, result.artifacts)
    objectives, constraints = _objectives(result.report)
    return _record(search, Trial(proposal.trial_id, proposal.params, COMPLETE, None,
                                 round(time.perf_counter() - started, 3), prepared.key,
                                 objectives=objectives, constraints=constraints))


def _check_same_files(note, trial_id: str, compressed: Optional[dict], artifacts) -> None:
    """The files measured are those the executor made (by sha256): a stage cache that is
    not one shared folder would show here."""
    made = (compressed or {}).get("artifacts") or {}
    differ = [a.id for a in artifacts if a.id in made and made[a.id] != a.sha256]
    if differ:
        note(f"warning: trial {trial_id}: {', '.join(differ)} differ from what the executor "
             "made (sha256): is the stage cache one folder every node shares?")


class _Failed(CompressError):
    """A stage failed where an executor ran it (its message as it was there)."""


def stage_cache_of(pipeline) -> Path:
    """The stage cache every run and trial of this output folder shares."""
    return pipeline.resolve(pipeline.output) / ".stages"


def run_trial(search: Search, proposal: Proposal) -> Trial:
    """One combination: skipped (it cannot be made), a duplicate of a finished trial, or
    run as a pipeline of its own (complete or failed, with why)."""
    prepared = prepare_trial(search, proposal)
    return prepared if isinstance(prepared, Trial) else finish_trial(search, prepared)


def started_count(search: Search) -> int:
    """Trials run or running: what max_trials counts."""
    return sum(t.state in (COMPLETE, FAILED) for t in search.trials) + search.in_flight


def out_of_time(search: Search) -> bool:
    budget = search.pipeline.search.time_budget_s
    return budget is not None and time.monotonic() - search.started > budget
