"""`executor: {type: ray}`: a search's trials compress as Ray tasks; each is measured
here as its task ends.

What goes where:
  Ray task    the variant's stages and baselines (compress.executors.ray_task), declared
              as cpus_per_trial CPUs (and memory_mb); as many at once as the cluster's CPUs
              allow. They write into the stage cache (runs/.stages): the only copy of
              every artifact, content-addressed, on a folder every node sees.
  this process each trial's pipeline, whose stages now come from the cache (the files
              the task made: same sha256, checked), then its benchmark through the usual
              places: one measurement at a time per device. A measurement on this machine
              first takes all of this node's CPUs from Ray (an actor holding them), so no
              compression runs beside it on the cores it times.

The results are those of a serial run: the same stages, the same cache keys, the same
files; only the order in which trials finish differs (the search's report sorts by id).
"""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Iterator, Optional

from compress.errors import RemoteError
from compress.lazy import require
from compress.measuring import PROJECT_ROOT


@dataclass
class Cluster:
    cpus: float
    node_id: Optional[str]      # this process's node (None: a client away from the cluster)
    node_cpus: float            # CPUs of that node, which its measurements take
    started: bool               # started for this search: shut down after it
    where: str


def _runtime_env(config) -> dict:
    path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


def _init(ray, config) -> bool:
    """Connect (or start a local instance); True when this process started it."""
    if ray.is_initialized():     # a Python caller's own cluster: used as it is
        return False
    address = config.address or os.environ.get("RAY_ADDRESS")
    options = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                   runtime_env=_runtime_env(config))
    try:
        if address:
            ray.init(address=address, **options)
        else:
            ray.init(address="local", num_cpus=config.num_cpus or os.cpu_count(), **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RemoteError(f"executor ray: could not reach the Ray cluster at {address}: "
                          f"{' '.join(str(exc).split())[:300]}. Start one (`ray start "
                          "--head`) or fix executor.address") from None
    return True


@contextlib.contextmanager
def cluster_for(ray, config) -> Iterator[Cluster]:
    started = _init(ray, config)
    try:
        context = ray.get_runtime_context()
        client = (config.address or "").startswith("ray://")
        node_id = None if client else context.get_node_id()
        nodes = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
        node_cpus = nodes[node_id]["Resources"].get("CPU", 0) if node_id in nodes else 0
        cpus = ray.cluster_resources().get("CPU", 0)
        where = (f"a Ray instance started here, {cpus:g} CPUs" if started and not config.address
                 else f"the Ray cluster at {config.address or 'RAY_ADDRESS'}: {len(nodes)} "
                 f"node(s), {cpus:g} CPUs")
        yield Cluster(cpus, node_id, node_cpus, started, where)
    finally:
        if started:
            ray.shutdown()


class _Hold:
    """An actor that only holds the CPUs it was placed with."""

    def ready(self) -> bool:
        return True


def core_lease(ray, cluster: Cluster):
    """A context manager that holds this node's CPUs while a measurement runs here (it
    waits for the compression tasks running on them to end)."""
    if cluster.node_id is None or cluster.node_cpus <= 0:
        return contextlib.nullcontext
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    holder = ray.remote(_Hold).options(
        num_cpus=cluster.node_cpus,
        scheduling_strategy=NodeAffinitySchedulingStrategy(cluster.node_id, soft=False))

    @contextlib.contextmanager
    def held():
        actor = holder.remote()
        try:
            ray.get(actor.ready.remote())
            yield
        finally:
            ray.kill(actor)
    return held


class Flight:
    """Ray tasks in flight, each with what it was sent for."""

    def __init__(self, ray):
        self.ray, self.waiting = ray, {}

    def add(self, ref, item) -> None:
        self.waiting[ref] = item

    def __len__(self) -> int:
        return len(self.waiting)

    def keys(self) -> set:
        return {item.key for item in self.waiting.values()}

    def next(self):
        """(item, the task's answer) of the first task to end."""
        done, _ = self.ray.wait(list(self.waiting), num_returns=1)
        return self.waiting.pop(done[0]), self.ray.get(done[0])


def _measures_here(search) -> bool:
    return any(not (t.ssh or t.hosts_file) for t in search.pipeline.targets)


def _finish(search, flight: Flight, lease) -> None:
    from compress.search import finish_trial
    prepared, answer = flight.next()
    search.in_flight -= 1
    with lease():
        trial = finish_trial(search, prepared, answer)
    prepared.proposal.told(trial)


def run_ray(search, proposals) -> None:
    from compress.executors.ray_task import compress_variant
    from compress.search import Trial, prepare_trial, run_trial, stage_cache_of
    ray = require("ray", "executor: ray")
    config, note = search.pipeline.executor, search.options["note"]
    with cluster_for(ray, config) as cluster:
        task = ray.remote(compress_variant).options(
            num_cpus=config.cpus_per_trial, max_retries=0,
            **({"memory": config.memory_mb * 2**20} if config.memory_mb else {}))
        window = config.max_concurrent or max(1, int(cluster.cpus // config.cpus_per_trial))
        note(f"search: trials compress on {cluster.where}, {window} at once; measured here, "
             "one at a time per device")
        lease = core_lease(ray, cluster) if _measures_here(search) else contextlib.nullcontext
        flight, later, threads = Flight(ray), [], max(1, int(config.cpus_per_trial))
        for proposal in proposals:
            prepared = prepare_trial(search, proposal)
            if isinstance(prepared, Trial):
                proposal.told(prepared)
                continue
            if prepared.key in flight.keys():   # its twin is in flight: a duplicate after it
                later.append(proposal)
                continue
            flight.add(task.remote(prepared.made, str(stage_cache_of(search.pipeline)),
                                   search.options["force"], threads), prepared)
            search.in_flight += 1
            while len(flight) >= window:
                _finish(search, flight, lease)
        while len(flight):
            _finish(search, flight, lease)
        for proposal in later:
            proposal.told(run_trial(search, proposal))

