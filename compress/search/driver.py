"""`search:`: the variants a space describes, run as trials, then one recommendation per
target from all of them (compress.search.report merges the trials' reports).

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

from itertools import islice
from typing import Iterator, Optional

from compress.search import resume as search_resume
from compress.search.space import EXHAUSTIVE_CAP, axes, combinations, size
from compress.search.trials import (OPTUNA_DEFAULT_TRIALS, STUDY_DB, TRIALS, Proposal, Search,
                                    out_of_time, started_count)


def _exhaustive(search: Search, limit: Optional[int]) -> Iterator[Proposal]:
    """The combinations in order, made one at a time; at most max(limit, the cap) of
    them looked at (check_exhaustive caps a search without a limit), so that a space of
    variants that cannot be made or repeat others is not walked to its end."""
    total, walk = size(search.space), max(limit or 0, EXHAUSTIVE_CAP)
    for index, params in enumerate(islice(combinations(search.space), walk)):
        if (limit is not None and started_count(search) >= limit) or out_of_time(search):
            return
        trial_id = f"t{index:03d}"
        done = search.resumable.get(trial_id)
        if done is not None and done.params == params:
            search.trials.append(done)
            search.resumed += 1
            continue
        yield Proposal(params, trial_id, f"combination {index + 1} of {total}, ")
    if walk < total and (limit is None or started_count(search) < limit):
        search.options["note"](f"search: stopped after {walk:,} of {total:,} combinations, "
                               "most of them variants that cannot be made or repeat "
                               "others: narrow search.space or use strategy: optuna")


def strategy_of(search_spec, space) -> tuple[str, Optional[int]]:
    """(exhaustive | optuna, how many trials at most: None for every combination)."""
    total = size(space)
    strategy = search_spec.strategy
    if strategy == "auto":
        strategy = "exhaustive" if total <= (search_spec.max_trials or total) else "optuna"
    if strategy == "exhaustive":
        return strategy, search_spec.max_trials
    return strategy, search_spec.max_trials or OPTUNA_DEFAULT_TRIALS


def _nothing_in_the_way(out) -> None:
    """What the search writes at its end (its reports, its history folder), checked
    before any trial, as a run checks its own: a link planted there fails the search now,
    not after its trials (compress.core.safe_files)."""
    from compress.core.safe_files import expect
    from compress.runner import history
    for name in history.REPORT_FILES:
        expect(out / name)
    expect(out / history.HISTORY, folder=True)


def run_search(pipeline, *, force: bool = False, strict: bool = False, quiet: bool = False,
               config_text: str | None = None, note=print):
    """Run the trials and write the search's report; returns the runner's Result."""
    from compress.runner.targets import resolve_targets
    from compress.runner.lock import RunLock
    from compress.core.safe_files import make_run_dir
    from compress.search.executors import TRIAL_EXECUTORS
    from compress.search.optuna_study import optuna_proposals
    from compress.search.report import conclude
    from compress.runner.tracking.mlflow import check_pipeline
    targets = resolve_targets(pipeline)   # a profile that fails to load fails first
    check_pipeline(pipeline)              # and an MLflow store that cannot be used
    space = axes(pipeline, targets)
    out = pipeline.run_dir
    make_run_dir(out)   # the output folder may be reached through a link, its run folder not
    search = Search(pipeline, space, out, {"force": force, "strict": strict,
                                           "quiet": quiet, "note": note},
                    targets=targets)
    lock = RunLock(out)
    lock.acquire(note)
    try:
        _nothing_in_the_way(out)
        current = search_resume.fingerprint(pipeline, targets.pairs)
        search_resume.prepare(out, TRIALS, STUDY_DB, note, current, force)
        search_resume.load(search)   # the finished trials whose records can be trusted
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
