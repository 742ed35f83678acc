"""One `measure()` for every engine, so numbers are comparable across runtimes."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from runtimes.memory import peak_rss_mb
from runtimes.session import Session


def _percentile(sorted_ms: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(sorted_ms), q))


def summarize_latencies(latencies_ms: list[float]) -> dict:
    ordered = sorted(latencies_ms)
    return {
        "p50": _percentile(ordered, 50), "p90": _percentile(ordered, 90),
        "p99": _percentile(ordered, 99), "mean": statistics.fmean(ordered),
        "std": statistics.pstdev(ordered) if len(ordered) > 1 else 0.0,
        "min": ordered[0], "max": ordered[-1],
    }


@dataclass(frozen=True)
class Timing:
    """How long to time: `warmup` untimed runs, then at least `runs` timed ones, going on
    until `min_seconds` have passed."""
    warmup: int = 10
    runs: int = 100
    min_seconds: float = 0.0


def measure(session: Session, feeds: dict[str, np.ndarray], timing: Timing = Timing(), *,
            meter=None, on_progress: Callable[[int, int], None] | None = None,
            snapshot: Callable[[], dict] | None = None) -> dict:
    """Time `session.run(feeds)` as `timing` says.

    Returns latency statistics in milliseconds, throughput in samples per second (batch
    size taken from the first input) and the process's peak RSS. Inputs are converted to
    the model's own types once, before timing (int8 for a full-int8 TFLite model).

    With a `meter`: its idle baseline is measured first (model loaded, nothing running),
    then it samples over the timed window only, and "energy" holds its `stop()` figures
    plus "mj_per_inference" (None when the meter could not give joules). With a
    `snapshot` (e.g. runtimes.conditions.snapshot), "conditions" holds one taken right
    before and one right after the timed window.
    """
    feeds = session.native_feeds(feeds)
    if meter is not None and hasattr(meter, "measure_idle"):
        meter.measure_idle()
    for _ in range(max(0, timing.warmup)):
        session.run(feeds)
    batch = int(next(iter(feeds.values())).shape[0]) if feeds else 1
    before = snapshot() if snapshot else None
    if meter is not None:
        meter.start()
    try:
        latencies, window_s = _timed(session, feeds, timing, on_progress)
        # Clocks and temperatures as they were while running, before the meter's own
        # shutdown lets a governor drop the frequency.
        after = snapshot() if snapshot else None
    finally:
        power = meter.stop() if meter is not None else None  # {"joules": ..., ...}
    return {
        "runs": len(latencies), "warmup": timing.warmup, "batch_size": batch,
        "latency_ms": summarize_latencies(latencies), "latency_samples_ms": latencies,
        "window_s": window_s,
        "throughput_per_s": batch * len(latencies) / window_s if window_s > 0 else None,
        "peak_rss_mb": peak_rss_mb(),
        "energy": _energy(power, window_s, len(latencies) * batch),
        "conditions": {"before": before, "after": after} if snapshot else None,
    }


def _timed(session: Session, feeds: dict, timing: Timing,
           on_progress: Callable[[int, int], None] | None) -> tuple[list[float], float]:
    """The timed window: each run's latency in ms, and the window's length in seconds."""
    latencies: list[float] = []
    window_start = time.perf_counter()
    while len(latencies) < timing.runs or time.perf_counter() - window_start < timing.min_seconds:
        t0 = time.perf_counter_ns()
        session.run(feeds)
        latencies.append((time.perf_counter_ns() - t0) / 1e6)
        if on_progress:
            on_progress(len(latencies), timing.runs)
    return latencies, time.perf_counter() - window_start


def _energy(power: dict | None, window_s: float, samples: int) -> dict | None:
    """The meter's figures with the energy over the timed window itself: the meter's window
    also holds its start and shutdown (a last read, a subprocess killed), which no
    inference used."""
    if power is None:
        return None
    joules = (power["active_w"] * window_s if power.get("joules") is not None
              and power.get("active_w") is not None else None)
    return {**power, "joules": joules, "window_s": window_s,
            "mj_per_inference": joules * 1000 / samples if joules is not None else None}
