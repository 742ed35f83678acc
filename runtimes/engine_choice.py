"""`--engine auto`: which installed engine runs this model fastest here, measured.

Every engine that opens the file's suffix and is installed opens the model with the same
settings (threads, precision f32 by default: an engine that would quietly run a float
model in bf16 is asked for f32) and runs a short block of timed calls on the same inputs,
one engine at a time with only its session open (two engines' thread pools alive at once
slow each other: on EfficientNet-Lite0 INT8, 2 cores, OpenVINO took 1.43-1.69 ms beside
an onnxruntime session against 1.22 ms alone, and lost the probe it wins), twice over in
mirrored order (A B B A) so that a clock that rises or falls during the probe favours no
engine. The fastest median wins. An engine that cannot open the model here is recorded
with its reason and left out.

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


def _probe(engine, model: str, settings: engines.Settings,
           feeds_for: Callable[[object], dict], runs: int) -> tuple[list[float], dict]:
    """One block of timed calls in a session of its own, closed after: two engines' thread
    pools alive at once contend for the cores (onnxruntime's spin while idle) and time
    neither as it runs alone."""
    session = engine.open(model, settings)
    try:
        return _block(session, session.native_feeds(feeds_for(session)), runs), \
            session.describe()
    finally:
        session.close()


def choose(model: str, settings: engines.Settings,
           feeds_for: Callable[[object], dict], runs: int = PROBE_RUNS) -> dict:
    """{"chosen": engine name, "probes": [...], "method": ...}; `feeds_for(session)`: the
    inputs to time, as that session takes them."""
    probes, usable = [], []
    for engine in engines.for_path(model):
        if engines.installed(engine):
            usable.append(engine)
        else:
            probes.append({"engine": engine.name,
                           "error": f"not installed here (pip install {engine.pip})"})
    times: dict[str, list[float]] = {}
    described: dict[str, dict] = {}
    for engine in usable + usable[::-1]:
        if any(p["engine"] == engine.name for p in probes):  # it failed once: enough
            continue
        try:
            block, described[engine.name] = _probe(engine, model, settings, feeds_for, runs)
            times.setdefault(engine.name, []).extend(block)
        except RuntimeInputError as exc:  # ProviderUnavailable too
            probes.append({"engine": engine.name, "error": str(exc)})
            times.pop(engine.name, None)
    if not times:
        reasons = "; ".join(f"{p['engine']}: {p['error']}" for p in probes)
        raise RuntimeInputError(f"no engine here can run {model} ({reasons})")
    probes += [{"engine": name, "p50_ms": round(statistics.median(t), 4), "runs": len(t),
                "description": described[name]} for name, t in times.items()]
    chosen = min((p for p in probes if "p50_ms" in p), key=lambda p: p["p50_ms"])["engine"]
    return {"chosen": chosen, "probes": sorted(probes, key=lambda p: p.get("p50_ms", 1e18)),
            "method": f"every installed engine that opens the file, one at a time in a "
                      f"session of its own, {runs} timed calls after {PROBE_WARMUP} untimed, "
                      "twice in mirrored order; fastest median chosen"}
