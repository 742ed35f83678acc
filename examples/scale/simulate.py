"""What the Ray trial scheduler costs per trial, with fake trials.

The scheduling pieces are the search's own (compress.executors.ray_trials: cluster_for,
Flight, core_lease; a RayExecutor config); only the trial is fake. Its "compression" is a
Ray task declaring cpus_per_trial CPUs that sleeps --work-ms, and its "measurement" is a
sleep of --measure-ms in this process under the core lease, as run_ray measures a trial.
The loop has run_ray's shape: `window` tasks in flight, finish one, send the next.

    python examples/scale/simulate.py [--trials 1000] [--work-ms 0] [--measure-ms 0]
                                      [--cpus 2] [--no-lease] [--json PATH]

Measured: Ray's start-up, the wall time of the loop, each trial's round trip (sent ->
its answer back here), each lease's acquire and release. Computed from them: the ideal
wall time (trials*work/window + trials*measure: what a scheduler costing nothing would
take) and the overhead per trial, (wall - ideal) / trials.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from compress.config_executor import RayExecutor  # noqa: E402  (this checkout's)
from compress.executors.ray_trials import Flight, cluster_for, core_lease  # noqa: E402


def fake_trial(index: int, work_s: float = 0.0) -> dict:
    """The Ray task: a compression that only takes work_s."""
    time.sleep(work_s)
    return {"index": index, "node": socket.gethostname(), "pid": os.getpid()}


@dataclass
class Sent:
    key: int          # Flight.keys() reads it (run_ray holds back twins by key)
    sent_at: float


@dataclass
class Figures:
    round_trip: list
    acquire: list
    release: list
    workers: set      # worker processes the tasks ran in (a new one: a process started)


def _measure(lease, measure_s: float, figures: Figures) -> None:
    """The driver's measurement of one trial, under the lease when there is one."""
    started = time.perf_counter()
    held = lease()
    held.__enter__()
    acquired = time.perf_counter()
    try:
        time.sleep(measure_s)
    finally:
        releasing = time.perf_counter()
        held.__exit__(None, None, None)
    figures.acquire.append(acquired - started)
    figures.release.append(time.perf_counter() - releasing)


def _finish(flight: Flight, lease, measure_s: float, figures: Figures) -> None:
    sent, answer = flight.next()
    figures.round_trip.append(time.perf_counter() - sent.sent_at)
    figures.workers.add(answer["pid"])
    if answer["index"] != sent.key:
        raise RuntimeError(f"trial {sent.key} got trial {answer['index']}'s answer")
    _measure(lease, measure_s, figures)


def _loop(ray, task, window: int, lease, args) -> Figures:
    """run_ray's loop: keep `window` tasks in flight; when full, finish one."""
    flight, figures = Flight(ray), Figures([], [], [], set())
    work_s, measure_s = args.work_ms / 1e3, args.measure_ms / 1e3
    for index in range(args.trials):
        flight.add(task.remote(index, work_s), Sent(index, time.perf_counter()))
        while len(flight) >= window:
            _finish(flight, lease, measure_s, figures)
    while len(flight):
        _finish(flight, lease, measure_s, figures)
    return figures


def _percentile(values: list, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def simulate(args) -> dict:
    import contextlib

    import ray
    config = RayExecutor(num_cpus=args.cpus)
    started = time.perf_counter()
    with cluster_for(ray, config) as cluster:
        ray_start = time.perf_counter() - started
        task = ray.remote(fake_trial).options(num_cpus=config.cpus_per_trial, max_retries=0)
        window = config.max_concurrent or max(1, int(cluster.cpus // config.cpus_per_trial))
        lease = contextlib.nullcontext if args.no_lease else core_lease(ray, cluster)
        begun = time.perf_counter()
        figures = _loop(ray, task, window, lease, args)
        wall = time.perf_counter() - begun
    return _record(args, ray.__version__, (ray_start, wall, window), figures)


def _record(args, version: str, timing: tuple, figures: Figures) -> dict:
    ray_start, wall, window = timing
    ideal = args.trials * (args.work_ms / 1e3 / window + args.measure_ms / 1e3)
    lease = [a + r for a, r in zip(figures.acquire, figures.release)]
    ms = lambda values, q: round(_percentile(values, q) * 1e3, 3)  # noqa: E731
    return {
        "trials": args.trials, "window": window, "cpus": args.cpus, "lease": not args.no_lease,
        "work_ms": args.work_ms, "measure_ms": args.measure_ms, "ray_version": version,
        "measured": {
            "ray_start_s": round(ray_start, 3), "wall_s": round(wall, 3),
            "task_worker_processes": len(figures.workers),
            "round_trip_ms": {"median": ms(figures.round_trip, 0.5),
                              "p90": ms(figures.round_trip, 0.9)},
            "lease_ms": None if args.no_lease else {
                "median": ms(lease, 0.5), "acquire_median": ms(figures.acquire, 0.5),
                "release_median": ms(figures.release, 0.5)}},
        "computed": {
            "ideal_s": round(ideal, 3),
            "serial_s": round(args.trials * (args.work_ms + args.measure_ms) / 1e3, 3),
            "overhead_ms_per_trial": round((wall - ideal) / args.trials * 1e3, 3)},
    }


def _print(record: dict) -> None:
    m, c = record["measured"], record["computed"]
    print(f"{record['trials']} fake trials, work {record['work_ms']:g} ms, measure "
          f"{record['measure_ms']:g} ms, {record['cpus']} CPUs, window {record['window']}, "
          f"lease {'on' if record['lease'] else 'off'}, Ray {record['ray_version']}")
    print(f"  measured  Ray start-up                  {m['ray_start_s']:9.3f} s")
    print(f"  measured  wall                          {m['wall_s']:9.3f} s")
    print(f"  computed  ideal wall                    {c['ideal_s']:9.3f} s"
          "   (trials*work/window + trials*measure)")
    print(f"  computed  serial wall                   {c['serial_s']:9.3f} s"
          "   (trials*(work + measure): no two trials overlapping)")
    print(f"  computed  overhead per trial            {c['overhead_ms_per_trial']:9.3f} ms"
          "  ((wall - ideal) / trials)")
    print(f"  measured  round trip median / p90       {m['round_trip_ms']['median']:9.3f} / "
          f"{m['round_trip_ms']['p90']:.3f} ms  (sent -> answer back here)")
    print(f"  measured  task worker processes         {m['task_worker_processes']:9d}")
    if m["lease_ms"]:
        lease = m["lease_ms"]
        print(f"  measured  lease acquire+release median  {lease['median']:9.3f} ms"
              f"  (acquire {lease['acquire_median']:.3f}, release {lease['release_median']:.3f})")


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--work-ms", type=float, default=0.0, help="each task's sleep")
    parser.add_argument("--measure-ms", type=float, default=0.0,
                        help="each measurement's sleep, in this process")
    parser.add_argument("--cpus", type=int, default=2, help="num_cpus of the Ray started here")
    parser.add_argument("--no-lease", action="store_true",
                        help="measure without taking the node's CPUs (isolates the lease's cost)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    if args.trials < 1 or args.cpus < 1 or args.work_ms < 0 or args.measure_ms < 0:
        parser.error("--trials and --cpus must be at least 1; --work-ms and --measure-ms "
                     "at least 0")
    return args


def main(argv=None) -> None:
    args = _arguments(argv)
    record = simulate(args)
    _print(record)
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
