"""Cheap checks before timing, and measurements a search reuses.

Screen.skip: a variant whose file is over a target's size budget, or whose metric (from
its first measurement, on any target) already drops more than a target's accuracy budget,
is not timed for that target: it cannot be recommended there, and on a device each
measurement costs seconds to minutes. Only when the benchmark says `skip_over_budget`
(a search's trials do).

Screen.recall: within one search, the same file measured the same way (engine, settings,
runner flags, benchmark settings, the same machine) is measured once: trials share their
baselines and every variant two trials both make, and targets measured on this machine
with the same engine, threads and runner flags share their numbers.
"""
from __future__ import annotations

import copy
import hashlib
import json
from typing import Optional


class Screen:
    def __init__(self, ctx, config, metric_info):
        self.profiles = dict(ctx.targets)
        self.remote = {name for name, fleet in ctx.fleets.items() if fleet.remote}
        self.memo = ctx.measured           # None outside a search
        self.skipping = config.skip_over_budget
        self.config = config.model_dump(mode="json", exclude={"name", "input", "artifacts"})
        self.metric_info = metric_info
        self.drops: dict[str, float] = {}  # artifact sha256 -> its metric's drop
        self.timed_here: dict[str, int] = {}  # key -> the job of this run that measures it

    def key(self, job) -> Optional[str]:
        if self.memo is None:
            return None
        where = job.target if job.target in self.remote else "here"
        parts = [job.artifact.sha256, job.engine, repr(job.settings), job.device_flags, job.max_drop,
                 job.where, job.comparison, job.is_baseline, where, self.config]
        return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()

    def skip(self, job) -> Optional[tuple[str, Optional[float]]]:
        """(why the job is not timed, the drop known) or None."""
        if not self.skipping or job.is_baseline or job.comparison:
            return None
        budget = self.profiles[job.target].budget
        size = job.artifact.size_bytes / 2**20
        if budget.model_size_mb is not None and size > budget.model_size_mb:
            return (f"not timed: {size:.3g} MB is over the {budget.model_size_mb:g} MB size "
                    "budget"), self.drops.get(job.artifact.sha256)
        drop = self.drops.get(job.artifact.sha256)
        if budget.accuracy_drop is not None and drop is not None and drop > budget.accuracy_drop:
            return (f"not timed: its metric drops {drop:.4g}, over the "
                    f"{budget.accuracy_drop:g} accuracy budget"), drop
        return None

    def saw(self, job, first_round, key: Optional[str] = None, index: int = 0) -> None:
        """Remember the metric's drop from a job's first round, and that this run times
        what the key names."""
        if key is not None:
            self.timed_here.setdefault(key, index)
        value = (first_round.metric or {}).get("value")
        if value is not None and self.metric_info and "baseline" in self.metric_info:
            self.drops[job.artifact.sha256] = self.metric_info["drop"](
                self.metric_info["baseline"], value)

    @staticmethod
    def copy_for(found: dict, job) -> dict:
        """Another job's record, as this job's (its artifact id and target)."""
        record = copy.deepcopy(found)
        record.update(artifact=job.artifact.id, target=job.target, reused_measurement=True)
        return record

    def recall(self, key: Optional[str], job) -> Optional[dict]:
        found = self.memo.get(key) if key else None
        if found is None:
            return None
        record = self.copy_for(found, job)
        drop = (record.get("metric") or {}).get("drop")
        if drop is not None:   # the later targets' accuracy check needs it as much
            self.drops[job.artifact.sha256] = drop
        return record

    def remember(self, key: Optional[str], record: dict) -> None:
        if key and "unmeasured" not in record:
            self.memo[key] = copy.deepcopy(record)
