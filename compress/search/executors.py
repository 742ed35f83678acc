"""Where a search's trials run: the executors, keyed by `executor.type` of pipeline.yaml
(compress.config.executor). Each is one function `(search, proposals) -> None` that
runs every proposal it is handed (the strategy stops handing them out at max_trials or
the time budget) and tells each proposal its trial (`proposal.told`).

local: one after another in this process. ray: compress.search.ray_trials.
"""
from __future__ import annotations

from typing import Callable, Iterator

from compress.core.registry import registrar

TRIAL_EXECUTORS: dict[str, Callable] = {}
register_executor = registrar(TRIAL_EXECUTORS)


@register_executor("local")
def run_local(search, proposals: Iterator) -> None:
    from compress.search.trials import run_trial
    for proposal in proposals:
        proposal.told(run_trial(search, proposal))


@register_executor("ray")
def run_on_ray(search, proposals: Iterator) -> None:
    from compress.search.ray_trials import run_ray
    run_ray(search, proposals)
