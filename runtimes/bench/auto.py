"""`--engine auto` in the runner: probe the installed engines here (engine_choice.py),
then measure in a fresh runner process with the fastest, and its result gains the
probe's record. With `--min-metric V` (the pipeline gives it: the source's metric less
the budget's accuracy_drop) the engine is chosen by the budget too: when the fastest
engine's metric on the evaluation data is under V, the next fastest is measured, and so
on; the first that meets V is kept, else the fastest. One INT8 file does not compute
the same on every engine (each has its own int8 kernels and rounding): on speed alone a
run can miss an accuracy budget that a slightly slower engine meets.
"""
from __future__ import annotations

import json
import subprocess
import sys

from runtimes import engines
from runtimes.bench.options import BenchOptions
from runtimes.bench.report import print_human
from runtimes.cpus import pin
from runtimes.engine_choice import choose


def _measure_with(engine: str, argv: list[str], opts: BenchOptions) -> subprocess.CompletedProcess:
    # the same arguments with the engine chosen: argparse keeps an option's last value;
    # placement only where the chosen engine makes it worth reporting (as when named)
    if not engines.get(engine).accelerated(opts.settings):
        argv = [arg for arg in argv if arg != "--placement"]
    return subprocess.run([sys.executable, "-m", "runtimes", "bench", *argv, "--json",
                           "--engine", engine], stdout=subprocess.PIPE, text=True)


def _by_budget(order: list[str], argv: list[str], opts: BenchOptions, choice: dict):
    """(exit code, the result kept): each engine fastest first until one's metric meets
    opts.min_metric (only the fastest without it); the fastest's result when none does."""
    kept, checked = None, []
    for engine in order if opts.min_metric is not None else order[:1]:
        done = _measure_with(engine, argv, opts)
        if done.returncode != 0:
            sys.stdout.write(done.stdout)
            # killed by a signal (the out-of-memory killer): said as a shell says it,
            # 128 + N, which the pipeline reads as that signal (a negative code would
            # leave this process as 256 - N, which says nothing)
            code = done.returncode
            return (128 - code if code < 0 else code), None
        result = json.loads(done.stdout.strip().splitlines()[-1])
        value = (result.get("metric") or {}).get("value")
        checked.append({"engine": engine, "metric": value})
        kept = kept or (engine, result)
        if value is None or opts.min_metric is None or value >= opts.min_metric:
            kept = (engine, result)
            break
    if opts.min_metric is not None:
        choice.update(budget={"min_metric": opts.min_metric, "checked": checked},
                      method=choice["method"] + f"; then, fastest first, the first whose metric "
                      f"is at least {opts.min_metric:g} (else the fastest)")
    choice["chosen"] = kept[0]
    return 0, kept[1]


def bench_auto(args, opts: BenchOptions, argv: list[str], timed_feeds) -> int:
    """--engine auto; `timed_feeds(session)`: the inputs each probe times."""
    if opts.cpus:
        pin(list(opts.cpus))    # the probe runs where the measurement will
    choice = choose(args.model, opts.settings, timed_feeds)
    print(f"engine auto: {choice['chosen']} ("
          + ", ".join(f"{p['engine']} {p['p50_ms']:.3f} ms" if "p50_ms" in p else
                      f"{p['engine']} unavailable" for p in choice["probes"]) + ")",
          file=sys.stderr, flush=True)
    order = [p["engine"] for p in choice["probes"] if "p50_ms" in p]   # fastest first
    code, result = _by_budget(order, argv, opts, choice)
    if result is None:
        return code
    result = {**result, "engine_choice": choice}
    if args.json:
        print(json.dumps(result))
    else:
        print_human(result)
    return 0
