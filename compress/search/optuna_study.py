"""The Optuna strategy: a multi-objective sampler (latency against the budgets, metric
drop) whose constraints are the budgets, its study kept in sqlite beside the trials so a
search that was killed resumes where it stopped."""
from __future__ import annotations

from pathlib import Path

from compress.core.lazy import require


def _study(path: Path, name: str, seed: int):
    optuna = require("optuna", "search.strategy optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # constraints (Trial.set_constraint): one per target, <= 0 when a variant of the
    # trial meets all that target's budgets
    sampler = optuna.samplers.TPESampler(seed=seed)
    return optuna, optuna.create_study(
        study_name=name, storage=f"sqlite:///{path}", load_if_exists=True,
        directions=["minimize", "minimize"], sampler=sampler)


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
    optuna, study = _study(path, name, search.pipeline.seed)
    killed = _requeue_killed(optuna, study)
    if killed:
        search.options["note"](f"search: {killed} trial(s) a kill interrupted are run again")
    distributions = {axis.key: optuna.distributions.CategoricalDistribution(
        list(range(len(axis.choices)))) for axis in search.space}
    for frozen in study.get_trials(deepcopy=False):   # finished in an earlier session
        found = search.resumable.get(f"t{frozen.number:03d}")
        if found is not None and frozen.state.is_finished():
            search.trials.append(found)
            search.resumed += 1
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
