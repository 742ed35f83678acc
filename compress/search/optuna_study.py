"""The Optuna strategy: a multi-objective sampler (latency against the budgets, metric
drop) whose constraints are the budgets, its study kept in sqlite beside the trials so a
search that was killed resumes where it stopped."""
from __future__ import annotations

from pathlib import Path

from compress.core.lazy import require
from compress.errors import ConfigError
from compress.core.safe_files import expect


def _study(path: Path, name: str, seed: int):
    optuna = require("optuna", "search.strategy optuna")
    for file in (path, f"{path}-journal", f"{path}-wal"):   # sqlite would follow a link
        expect(file)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # constraints (Trial.set_constraint): one per target, <= 0 when a variant of the
    # trial meets all that target's budgets
    sampler = optuna.samplers.TPESampler(seed=seed)
    return optuna, optuna.create_study(
        study_name=name, storage=f"sqlite:///{path}", load_if_exists=True,
        directions=["minimize", "minimize"], sampler=sampler)


def _open_study(path: Path, name: str, seed: int):
    """The study, its trials a kill left running requeued: (optuna, study, how many).
    A file that is not a study this Optuna can read (cut short, another program's
    database, another version's schema) is a ConfigError naming it and the fix."""
    try:
        optuna, study = _study(path, name, seed)
        return optuna, study, _requeue_killed(optuna, study)
    except Exception as exc:
        # the storage's errors told by their module, not imported here: without the search
        # extra, _study's MissingDependency (pip install optuna) is what must come out
        if not isinstance(exc, (RuntimeError, ValueError, KeyError)) and \
                type(exc).__module__.split(".")[0] not in ("optuna", "sqlalchemy", "sqlite3"):
            raise
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    raise ConfigError(f"the search's Optuna study cannot be read ({why}): run again with "
                      "--force to set it aside and start the search afresh, or delete it",
                      file=str(path))


def _requeue_killed(optuna, study) -> int:
    """Trials a kill left running: failed, and their parameters asked again first."""
    killed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for trial in killed:
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        study.enqueue_trial(trial.params, skip_if_exists=False)
    return len(killed)


def optuna_proposals(search, limit: int, path: Path, name: str):
    """Proposals from the study; each is told its trial's objectives when it ends (an
    executor running several at once asks ahead: the sampler sees them as running)."""
    from compress.search.trials import Proposal, out_of_time, started_count
    optuna, study, killed = _open_study(path, name, search.pipeline.seed)
    if killed:
        search.options["note"](f"search: {killed} trial(s) a kill interrupted are run again")
    distributions = {axis.key: optuna.distributions.CategoricalDistribution(
        list(range(len(axis.choices)))) for axis in search.space}
    _resume(optuna, study, search)
    # a sampler on a small space proposes finished variants again (answered from their
    # records, not run): past this many proposals in a row it has nothing new to offer
    for _ in range(limit * REPEATS_PER_TRIAL):
        if started_count(search) >= limit or out_of_time(search) or _tried_everything(search):
            break
        trial = study.ask(distributions)
        params = {a.key: a.choices[trial.params[a.key]] for a in search.space}
        yield Proposal(params, f"t{trial.number:03d}",
                       f"{started_count(search) + 1} of at most {limit}, ",
                       told=lambda result, trial=trial: _tell(optuna, study, trial, search,
                                                              result))


def _resume(optuna, study, search) -> None:
    """The trials an earlier session finished: resumed where their record agrees with the
    study (the same parameters). One whose record is stale (resume.load) or names other
    parameters than the study's is asked again first: measured again, never dropped."""
    from compress.search.trials import RECORD, TRIALS
    for frozen in study.get_trials(deepcopy=False):
        trial_id = f"t{frozen.number:03d}"
        found = search.resumable.get(trial_id)
        if not frozen.state.is_finished():
            continue
        if found is not None and found.params == _decoded(search.space, frozen.params):
            search.trials.append(found)
            search.resumed += 1
            continue
        if found is not None:
            if search.finished.get(found.variant_key) is found:
                del search.finished[found.variant_key]
            search.options["note"](f"search: {search.out / TRIALS / trial_id / RECORD} names "
                                   f"other parameters than the study's trial {frozen.number}: "
                                   "it is run again")
        elif trial_id not in search.stale or frozen.state != optuna.trial.TrialState.COMPLETE:
            continue
        study.enqueue_trial(frozen.params, skip_if_exists=False)


def _decoded(space, params: dict):
    """A study trial's parameters as the space's choices (None: not of this space)."""
    try:
        return {a.key: a.choices[params[a.key]] for a in space}
    except (KeyError, IndexError, TypeError):
        return None


def _tell(optuna, study, trial, search, result) -> None:
    from compress.search.trials import COMPLETE, DUPLICATE
    if result.state in (COMPLETE, DUPLICATE) and result.objectives:
        for target, value in zip(search.targets.names, result.constraints):
            trial.set_constraint(target, value)
        study.tell(trial, result.objectives)
    else:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)


REPEATS_PER_TRIAL = 10


def _tried_everything(search) -> bool:
    """Every combination has been made (a small space sampled past its size): the
    sampler would only repeat them."""
    from compress.search.space import size
    return len({tuple(map(repr, t.params.values())) for t in search.trials}) >= size(search.space)
