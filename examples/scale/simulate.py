"""What the Ray trial scheduler costs per trial, with fake trials.

The scheduling is the search's own (compress.search.ray_trials: cluster_for, Flight
and run_ray's loop, `drive`; a RayExecutor config); only the trial is fake. Its
"compression" is a Ray task declaring cpus_per_trial CPUs that sleeps --work-ms, and its
"measurement" a sleep of --measure-ms here. By default the measurements are on this node,
whose CPUs are Ray's too, so they wait for the tasks in flight to end (run_ray's drain);
--measure-elsewhere measures as for boards: each trial as soon as its task ends.

    python examples/scale/simulate.py [--trials 1000] [--work-ms 0] [--measure-ms 0]
                                      [--cpus 2] [--measure-elsewhere] [--json PATH]

Measured: Ray's start-up, the wall time of the loop, each trial's round trip (sent ->
its answer back here). Computed from them: the ideal wall time (what a scheduler
costing nothing would take: trials*work/window + trials*measure when measurements and
compressions take turns, max of the two otherwise) and the overhead per trial,
(wall - ideal) / trials.
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

from compress.config.executor import RayExecutor  # noqa: E402  (this checkout's)
from compress.search.ray_trials import Flight, cluster_for, drive  # noqa: E402


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
    workers: set      # worker processes the tasks ran in (a new one: a process started)


def _loop(ray, task, window: int, args) -> Figures:
    """run_ray's loop (ray_trials.drive) over fake trials."""
    figures = Figures([], set())
    work_s, measure_s = args.work_ms / 1e3, args.measure_ms / 1e3

    def finish(sent: Sent, answer: dict) -> None:
        figures.round_trip.append(time.perf_counter() - sent.sent_at)
        figures.workers.add(answer["pid"])
        if answer["index"] != sent.key:
            raise RuntimeError(f"trial {sent.key} got trial {answer['index']}'s answer")
        time.sleep(measure_s)
    sends = ((task.remote(i, work_s), Sent(i, time.perf_counter())) for i in range(args.trials))
    drive(Flight(ray), sends, window, finish, drain=not args.measure_elsewhere)
    return figures


def _percentile(values: list, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def simulate(args) -> dict:
    import ray
    config = RayExecutor(num_cpus=args.cpus)
    started = time.perf_counter()
    with cluster_for(ray, config) as cluster:
        ray_start = time.perf_counter() - started
        task = ray.remote(fake_trial).options(num_cpus=config.cpus_per_trial, max_retries=0)
        window = config.max_concurrent or max(1, int(cluster.cpus // config.cpus_per_trial))
        begun = time.perf_counter()
        figures = _loop(ray, task, window, args)
        wall = time.perf_counter() - begun
    return _record(args, ray.__version__, (ray_start, wall, window), figures)


def _record(args, version: str, timing: tuple, figures: Figures) -> dict:
    ray_start, wall, window = timing
    compressing, measuring = args.trials * args.work_ms / 1e3 / window, \
        args.trials * args.measure_ms / 1e3
    ideal = max(compressing, measuring) if args.measure_elsewhere else compressing + measuring
    ms = lambda values, q: round(_percentile(values, q) * 1e3, 3)  # noqa: E731
    return {
        "trials": args.trials, "window": window, "cpus": args.cpus,
        "measured_here": not args.measure_elsewhere,
        "work_ms": args.work_ms, "measure_ms": args.measure_ms, "ray_version": version,
        "measured": {
            "ray_start_s": round(ray_start, 3), "wall_s": round(wall, 3),
            "task_worker_processes": len(figures.workers),
            "round_trip_ms": {"median": ms(figures.round_trip, 0.5),
                              "p90": ms(figures.round_trip, 0.9)}},
        "computed": {
            "ideal_s": round(ideal, 3),
            "serial_s": round(args.trials * (args.work_ms + args.measure_ms) / 1e3, 3),
            "overhead_ms_per_trial": round((wall - ideal) / args.trials * 1e3, 3)},
    }


def _print(record: dict) -> None:
    m, c = record["measured"], record["computed"]
    print(f"{record['trials']} fake trials, work {record['work_ms']:g} ms, measure "
          f"{record['measure_ms']:g} ms, {record['cpus']} CPUs, window {record['window']}, "
          f"measured {'here (turns with compression)' if record['measured_here'] else 'elsewhere'}"
          f", Ray {record['ray_version']}")
    print(f"  measured  Ray start-up                  {m['ray_start_s']:9.3f} s")
    print(f"  measured  wall                          {m['wall_s']:9.3f} s")
    print(f"  computed  ideal wall                    {c['ideal_s']:9.3f} s"
          "   (a scheduler that costs nothing)")
    print(f"  computed  serial wall                   {c['serial_s']:9.3f} s"
          "   (trials*(work + measure): no two trials overlapping)")
    print(f"  computed  overhead per trial            {c['overhead_ms_per_trial']:9.3f} ms"
          "  ((wall - ideal) / trials)")
    print(f"  measured  round trip median / p90       {m['round_trip_ms']['median']:9.3f} / "
          f"{m['round_trip_ms']['p90']:.3f} ms  (sent -> answer back here)")
    print(f"  measured  task worker processes         {m['task_worker_processes']:9d}")


def _arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--work-ms", type=float, default=0.0, help="each task's sleep")
    parser.add_argument("--measure-ms", type=float, default=0.0,
                        help="each measurement's sleep, in this process")
    parser.add_argument("--cpus", type=int, default=2, help="num_cpus of the Ray started here")
    parser.add_argument("--measure-elsewhere", action="store_true",
                        help="measurements on boards: each trial measured as its task ends")
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
