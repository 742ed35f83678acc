"""`--engine auto`: which installed engine runs this model fastest here, measured.

Every engine that opens the file's suffix and is installed opens the model with the same
settings (threads, precision f32 by default: an engine that would quietly run a float
model in bf16 is asked for f32); then, in turn, each runs a short block of timed calls
on the same inputs, twice over in mirrored order (A B B A) so that a clock that rises or
falls during the probe favours no engine. The fastest median wins. An engine that
cannot open the model here is recorded with its reason and left out.

The measurement itself then runs in a fresh process with the chosen engine (bench.py),
so its memory figures hold only that engine and that model, as with a named engine.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

from runtimes import engines
from runtimes.errors import RuntimeInputError

AUTO = "auto"
PROBE_WARMUP, PROBE_RUNS = 3, 15   # per block; two blocks per engine


def _block(session, feeds: dict, runs: int) -> list[float]:
    for _ in range(PROBE_WARMUP):
        session.run(feeds)
    times = []
    for _ in range(runs):
        started = time.perf_counter_ns()
        session.run(feeds)
        times.append((time.perf_counter_ns() - started) / 1e6)
    return times


def _open_all(model: str, settings: engines.Settings) -> tuple[dict, list[dict]]:
    """{name: session} of every installed engine that opens `model`, and the probe
    records of those that could not."""
    sessions, failed = {}, []
    for engine in engines.for_path(model):
        if not engines.installed(engine):
            failed.append({"engine": engine.name, "error": "not installed here "
                           f"(pip install {engine.pip})"})
            continue
        try:
            sessions[engine.name] = engine.open(model, settings)
        except RuntimeInputError as exc:  # ProviderUnavailable too
            failed.append({"engine": engine.name, "error": str(exc)})
    return sessions, failed


def choose(model: str, settings: engines.Settings,
           feeds_for: Callable[[object], dict], runs: int = PROBE_RUNS) -> dict:
    """{"chosen": engine name, "probes": [...], "method": ...}; `feeds_for(session)`: the
    inputs to time, as that session takes them."""
    sessions, probes = _open_all(model, settings)
    try:
        if not sessions:
            reasons = "; ".join(f"{p['engine']}: {p['error']}" for p in probes)
            raise RuntimeInputError(f"no engine here can run {model} ({reasons})")
        feeds = {name: session.native_feeds(feeds_for(session))
                 for name, session in sessions.items()}
        times: dict[str, list[float]] = {name: [] for name in sessions}
        order = list(sessions)
        for name in order + order[::-1]:
            times[name] += _block(sessions[name], feeds[name], runs)
        for name in order:
            probes.append({"engine": name, "p50_ms": round(statistics.median(times[name]), 4),
                           "runs": len(times[name]),
                           "description": sessions[name].describe()})
    finally:
        for session in sessions.values():
            session.close()
    timed = [p for p in probes if "p50_ms" in p]
    chosen = min(timed, key=lambda p: p["p50_ms"])["engine"]
    return {"chosen": chosen, "probes": sorted(probes, key=lambda p: p.get("p50_ms", 1e18)),
            "method": f"every installed engine that opens the file, {runs} timed calls "
                      f"after {PROBE_WARMUP} untimed, twice in mirrored order; fastest "
                      "median chosen"}
