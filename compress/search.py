"""`search:`: the variants a space describes, run as trials, then one recommendation per
target from all of them (compress.search_report merges the trials' reports).

Each trial is the pipeline with one combination of choices, run as a pipeline of its own
in `runs/<name>/trials/<id>/`. Its stages come from the stage cache shared by every run,
so a prefix the trials share (the export before five quantizations) runs once; its
benchmark times a variant for a target only when the variant's file and metric fit the
target's size and accuracy budgets (cheap checks first), and measurements repeat across
trials only when something in them changed.

Resuming: a finished trial leaves `trial.json` in its folder; a search run again with
the same space skips those. With Optuna the study is kept in `runs/<name>/search.db`
(sqlite): a trial a kill left running is marked failed and asked again first.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

from compress import search_resume
from compress.artifacts import write_json_atomic
from compress.decide import over_ratio
from compress.errors import CompressError, StageError
from compress.search_space import axes, combinations, size, variant, variant_key

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
    objectives: Optional[list] = None       # [worst p90 / budget over targets, best drop]
    constraints: list = field(default_factory=list)   # <= 0: every budget of a target held


@dataclass
class Search:
    """What every trial of one search shares."""
    pipeline: object
    space: list
    out: Path
    options: dict                           # force, strict, quiet for each trial's run
    finished: dict = field(default_factory=dict)   # variant key -> Trial (complete)
    resumable: dict = field(default_factory=dict)  # trial id -> Trial from a past session
    trials: list = field(default_factory=list)
    memo: dict = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    resumed: int = 0
    in_flight: int = 0                      # trials an executor is compressing now
    targets: tuple = ()                     # the target names, in the pipeline's order


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
    folder = search.out / TRIALS / trial.id
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / RECORD, asdict(trial))
    search.trials.append(trial)
    if trial.variant_key and trial.state in (COMPLETE, FAILED):   # twins in this session
        search.finished[trial.variant_key] = trial
    return trial


def _variant(search: Search, params: dict, trial_id: str):
    update = {"name": trial_id, "output": str(search.out / TRIALS), "tracking": None}
    made, why = variant(search.pipeline, search.space, params, **update)
    if made is None:
        return None, why
    last = made.stages[-1]
    if last.type == "benchmark":   # cheap checks first: see compress.bench_screen
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
    made, why = _variant(search, proposal.params, proposal.trial_id)
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
    from compress.runner import run_pipeline
    proposal, note = prepared.proposal, search.options["note"]
    elapsed = time.monotonic() - search.started
    note(f"trial {proposal.trial_id} ({proposal.position}{elapsed:.0f} s into the search): "
         f"{', '.join(f'{k}={v}' for k, v in proposal.params.items())}")
    started = time.perf_counter()
    try:
        if compressed is not None and "message" in compressed:
            raise (_Failed if compressed["stage_error"] else CompressError)(compressed["message"])
        # what an executor made is reused, even when forced: it was forced there
        result = run_pipeline(prepared.made, force=search.options["force"] and not compressed,
                              strict=search.options["strict"], quiet=search.options["quiet"],
                              stage_cache=stage_cache_of(search.pipeline), measured=search.memo)
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


def _out_of_time(search: Search) -> bool:
    budget = search.pipeline.search.time_budget_s
    return budget is not None and time.monotonic() - search.started > budget


def _exhaustive(search: Search, limit: Optional[int]) -> Iterator[Proposal]:
    every = combinations(search.space)
    for index, params in enumerate(every):
        if (limit is not None and started_count(search) >= limit) or _out_of_time(search):
            break
        trial_id = f"t{index:03d}"
        done = search.resumable.get(trial_id)
        if done is not None and done.params == params:
            search.trials.append(done)
            search.resumed += 1
            continue
        yield Proposal(params, trial_id, f"combination {index + 1} of {len(every)}, ")


def strategy_of(search_spec, space) -> tuple[str, Optional[int]]:
    """(exhaustive | optuna, how many trials at most: None for every combination)."""
    total = size(space)
    strategy = search_spec.strategy
    if strategy == "auto":
        strategy = "exhaustive" if total <= (search_spec.max_trials or total) else "optuna"
    if strategy == "exhaustive":
        return strategy, search_spec.max_trials
    return strategy, search_spec.max_trials or OPTUNA_DEFAULT_TRIALS


def run_search(pipeline, *, force: bool = False, strict: bool = False, quiet: bool = False,
               config_text: str | None = None, note=print):
    """Run the trials and write the search's report; returns the runner's Result."""
    from compress.checks import resolve_targets
    from compress.runlock import RunLock
    from compress.executors.trials import TRIAL_EXECUTORS
    from compress.search_optuna import optuna_proposals
    from compress.search_report import conclude
    from compress.tracking import check_pipeline
    targets, _ = resolve_targets(pipeline)   # a profile that fails to load fails first
    check_pipeline(pipeline)                 # and an MLflow store that cannot be used
    space = axes(pipeline)
    out = pipeline.run_dir
    out.mkdir(parents=True, exist_ok=True)
    search = Search(pipeline, space, out, {"force": force, "strict": strict,
                                           "quiet": quiet, "note": note},
                    targets=tuple(name for name, _ in targets))
    lock = RunLock(out)
    lock.acquire(note)
    try:
        current = search_resume.fingerprint(pipeline, targets)
        search_resume.prepare(out, TRIALS, STUDY_DB, note, current, force)
        search.resumable = search_resume.finished(out, TRIALS, RECORD, Trial)
        search.finished = {t.variant_key: t for t in search.resumable.values()}
        strategy, limit = strategy_of(pipeline.search, space)
        note(f"{pipeline.name}: search, {strategy}, "
             f"{size(space)} combinations"
             f"{f', at most {limit} trials' if limit else ''}")
        proposals = (_exhaustive(search, limit) if strategy == "exhaustive" else
                     optuna_proposals(search, limit, out / STUDY_DB, f"search-{current[:16]}"))
        TRIAL_EXECUTORS[pipeline.executor.type](search, proposals)
        return conclude(search, strategy, config_text)
    finally:
        lock.release()
