"""One `measure()` for every engine, so numbers are comparable across runtimes."""
from __future__ import annotations

import statistics
import time
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


def measure(session: Session, feeds: dict[str, np.ndarray], *, warmup: int = 10,
            runs: int = 100, min_seconds: float = 0.0, meter=None,
            on_progress: Callable[[int, int], None] | None = None,
            snapshot: Callable[[], dict] | None = None) -> dict:
    """Time `session.run(feeds)`.

    Runs at least `runs` timed iterations and keeps going until `min_seconds` have
    passed. Returns latency statistics in milliseconds, throughput in samples per
    second (batch size taken from the first input) and the process's peak RSS. Inputs are
    converted to the model's own types once, before timing (int8 for a full-int8 TFLite
    model).

    With a `meter`: its idle baseline is measured first (model loaded, nothing running),
    then it samples over the timed window only, and "energy" holds its `stop()` figures
    plus "mj_per_inference" (None when the meter could not give joules). With a
    `snapshot` (e.g. runtimes.conditions.snapshot), "conditions" holds one taken right
    before and one right after the timed window.
    """
    feeds = session.native_feeds(feeds)
    if meter is not None and hasattr(meter, "measure_idle"):
        meter.measure_idle()
    for _ in range(max(0, warmup)):
        session.run(feeds)
    batch = int(next(iter(feeds.values())).shape[0]) if feeds else 1
    latencies: list[float] = []
    before = snapshot() if snapshot else None
    if meter is not None:
        meter.start()
    try:
        window_start = time.perf_counter()
        while len(latencies) < runs or time.perf_counter() - window_start < min_seconds:
            t0 = time.perf_counter_ns()
            session.run(feeds)
            latencies.append((time.perf_counter_ns() - t0) / 1e6)
            if on_progress:
                on_progress(len(latencies), runs)
        window_s = time.perf_counter() - window_start
        # Clocks and temperatures as they were while running, before the meter's own
        # shutdown lets a governor drop the frequency.
        after = snapshot() if snapshot else None
    finally:
        power = meter.stop() if meter is not None else None  # {"joules": ..., ...}
    energy = None
    if power is not None:
        # Energy over the timed window itself: the meter's window also holds its start
        # and shutdown (a last read, a subprocess killed), which no inference used.
        joules = (power["active_w"] * window_s if power.get("joules") is not None
                  and power.get("active_w") is not None else None)
        energy = {**power, "joules": joules, "window_s": window_s,
                  "mj_per_inference": (joules * 1000 / (len(latencies) * batch)
                                       if joules is not None else None)}
    stats = summarize_latencies(latencies)
    return {
        "runs": len(latencies), "warmup": warmup, "batch_size": batch,
        "latency_ms": stats, "latency_samples_ms": latencies, "window_s": window_s,
        "throughput_per_s": batch * len(latencies) / window_s if window_s > 0 else None,
        "peak_rss_mb": peak_rss_mb(),
        "energy": energy,
        "conditions": {"before": before, "after": after} if snapshot else None,
    }
