"""`executor: {type: ray}`: a search's trials compress as Ray tasks; each is measured
here as its task ends.

What goes where:
  Ray task    the variant's stages and baselines (compress.search.ray_task), declared
              as cpus_per_trial CPUs (and memory_mb); as many at once as the cluster's CPUs
              allow. They write into the stage cache (runs/.stages): the only copy of
              every artifact, content-addressed, on a folder every node sees.
  this process each trial's pipeline, whose stages now come from the cache (the files
              the task made: same sha256, checked), then its benchmark through the usual
              places: one measurement at a time per device. When this node's CPUs are
              Ray's too and a target measures here, the trials in flight all end before
              any is measured, and none is sent meanwhile: compression and measurement
              take turns on these cores (on a cluster, start the head with --num-cpus=0
              so they never need to).

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
from compress.core.lazy import require
from compress.measure.client import PROJECT_ROOT


@dataclass
class Cluster:
    cpus: float
    node_id: Optional[str]      # this process's node (None: a client away from the cluster)
    node_cpus: float            # CPUs of that node, which its measurements take
    started: bool               # started for this search: shut down after it
    where: str


def _runtime_env(threads: int) -> dict:
    """A task's environment: this checkout importable, and the thread count of the math
    libraries set as here (Ray sets OMP_NUM_THREADS to a task's CPUs; numpy's BLAS and
    torch sum floats in an order that follows their threads: the same count, the same
    files as a serial search)."""
    path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p)
    count = os.environ.get("OMP_NUM_THREADS") or str(threads)
    return {"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": count,
                         "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", count),
                         "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS", count)}}


def _init(ray, config) -> bool:
    """Connect (or start a local instance); True when this process started it."""
    if ray.is_initialized():     # a Python caller's own cluster: used as it is
        return False
    address = config.address or os.environ.get("RAY_ADDRESS")
    if (address or "").startswith("ray://"):   # Ray's client speaks gRPC: its own extra
        require("grpc", f"executor address {address}")
    options = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
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
        """(item, the task's answer) of the first task to end. A task lost with its
        worker or node (killed, out of memory) answers as a failed stage: the search
        records the trial failed and a resumed search runs it again; an exception the
        task raised (a bug) is raised here."""
        done, _ = self.ray.wait(list(self.waiting), num_returns=1)
        item = self.waiting.pop(done[0])
        errors = self.ray.exceptions
        try:
            return item, self.ray.get(done[0])
        except errors.RayTaskError:
            raise
        except errors.RayError as exc:
            return item, {"message": f"its Ray task was lost: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:300]}", "stage_error": True}


def drive(flight: Flight, submissions, window: int, finish, drain: bool) -> None:
    """Keep `window` tasks in flight (`submissions`: (task ref, item), read as room
    frees up); `finish(item, answer)` each here as it ends. With `drain` (this node's
    CPUs both compress and measure), every task in flight ends before any is finished
    here, and none is sent meanwhile: a measurement never shares cores with compression."""
    for ref, item in submissions:
        flight.add(ref, item)
        while len(flight) >= window:
            _land(flight, finish, drain)
    while len(flight):
        _land(flight, finish, drain)


def _land(flight: Flight, finish, drain: bool) -> None:
    ended = [flight.next()]
    while drain and len(flight):
        ended.append(flight.next())
    for item, answer in ended:
        finish(item, answer)


def _torch_threads() -> int:
    """The threads torch compresses with here: a task uses as many, since torch's float
    sums follow its thread count, and the same count makes the same files as here."""
    torch = require("torch", "a search's trials")
    return torch.get_num_threads()


def _measures_here(search) -> bool:
    return any(not target.remote for target in search.pipeline.targets)


def _submissions(search, proposals, task, flight: Flight, later: list, threads: int):
    """(task ref, Prepared) per trial to compress; skips and duplicates are told at once,
    a twin of a trial in flight waits for it (`later`: then a duplicate)."""
    from compress.search.trials import Trial, prepare_trial, stage_cache_of
    for proposal in proposals:
        prepared = prepare_trial(search, proposal)
        if isinstance(prepared, Trial):
            proposal.told(prepared)
        elif prepared.key in flight.keys():
            later.append(proposal)
        else:
            search.in_flight += 1
            yield task.remote(prepared.made, str(stage_cache_of(search.pipeline)),
                              search.options["force"], threads, search.targets), prepared


def run_ray(search, proposals) -> None:
    from compress.search.ray_task import compress_variant
    from compress.search.trials import finish_trial, run_trial
    ray = require("ray", "executor: ray")
    config, note = search.pipeline.executor, search.options["note"]
    threads = _torch_threads()
    with cluster_for(ray, config) as cluster:
        task = ray.remote(compress_variant).options(
            num_cpus=config.cpus_per_trial, max_retries=0, runtime_env=_runtime_env(threads),
            **({"memory": config.memory_mb * 2**20} if config.memory_mb else {}))
        window = config.max_concurrent or max(1, int(cluster.cpus // config.cpus_per_trial))
        # this node's cores compress and measure: they take turns
        drain = _measures_here(search) and cluster.node_cpus > 0
        note(f"search: trials compress on {cluster.where}, {window} at once; measured here, "
             f"one at a time per device{', once the trials in flight end' if drain else ''}")

        def finish(prepared, answer):
            search.in_flight -= 1
            prepared.proposal.told(finish_trial(search, prepared, answer))
        flight, later = Flight(ray), []
        drive(flight, _submissions(search, proposals, task, flight, later, threads), window,
              finish, drain)
        for proposal in later:
            proposal.told(run_trial(search, proposal))
