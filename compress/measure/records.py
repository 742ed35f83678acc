"""One benchmark record from a job's rounds: latencies pooled, power and energy averaged,
the metric and where it was measured (what report.json's `benchmarks` hold)."""
from __future__ import annotations

import statistics

from compress.measure.noise import of_rounds
from runtimes.measure import summarize_latencies
from runtimes.result import Measurement


def _pool_power(rounds: list[Measurement]) -> dict:
    """Power and energy over rounds: means of the rounds that measured them; the
    conditions before the first and after the last round, with every warning."""
    pooled = {}
    energies = [r.energy_mj for r in rounds if r.energy_mj is not None]
    pooled["energy_mj"] = statistics.fmean(energies) if energies else None
    powers = [r.power for r in rounds if r.power]
    if powers:
        def mean_of(key):  # a round can miss a figure (too few samples, idle failed)
            values = [p[key] for p in powers if p.get(key) is not None]
            return statistics.fmean(values) if values else None
        pooled["power"] = {**powers[0], **{key: mean_of(key) for key in (
                               "mean_w", "idle_w", "active_w", "sample_rate_hz")},
                           "samples": sum(p.get("samples") or 0 for p in powers),
                           "window_s": sum(p.get("window_s") or 0 for p in powers)}
        joules = [p.get("joules") for p in powers]
        notes = sorted({p["note"] for p in powers if p.get("note")})
        pooled["power"].update(joules=sum(joules) if None not in joules else None,
                               note="; ".join(notes) or None)
    conditions = [r.conditions for r in rounds if r.conditions]
    if conditions:
        pooled["conditions"] = {
            **conditions[0], "after": conditions[-1].get("after"),
            "warnings": sorted({w for c in conditions for w in c.get("warnings") or []})}
    return pooled


def pool_rounds(rounds: list[Measurement]) -> Measurement:
    """One result from several rounds: latencies pooled (with each round's p50 and p90
    and the p90's interval: noise.of_rounds), worst memory, first metric."""
    power = _pool_power(rounds)
    samples = tuple(ms for r in rounds for ms in r.latency_samples_ms)
    return rounds[0].replace(
        latency_ms=of_rounds([r.latency_samples_ms for r in rounds]), latency_samples_ms=samples,
        runs=len(samples), window_s=sum(r.window_s for r in rounds),
        throughput_per_s=rounds[0].batch_size * len(samples) / sum(r.window_s for r in rounds),
        peak_rss_mb=max(r.peak_rss_mb for r in rounds),
        model_rss_mb=max(r.model_rss_mb for r in rounds),
        wall_s=statistics.median(r.wall_s for r in rounds),
        # each round is a fresh process: its load and first call, the median of them
        **{key: statistics.median(getattr(r, key) for r in rounds)
           for key in ("load_ms", "first_run_ms")
           if all(getattr(r, key) is not None for r in rounds)},
        **power)


def by_device(rounds: list[Measurement]) -> list[dict]:
    """Per device of a fleet: the rounds it timed and its own p50 and p90 (the spread
    between boards of one profile: what a pooled figure hides)."""
    devices: dict[str, list[Measurement]] = {}
    for measured in rounds:
        devices.setdefault(measured.device, []).append(measured)
    rows = []
    for device, mine in devices.items():
        stats = summarize_latencies([ms for r in mine for ms in r.latency_samples_ms])
        rows.append({"device": device, "rounds": len(mine), "p50": stats["p50"],
                     "p90": stats["p90"]})
    return rows


def spread(devices: list[dict]) -> float | None:
    """How much slower the slowest device's p90 is than the fastest's (0.05: 5 %)."""
    p90s = [row["p90"] for row in devices]
    return max(p90s) / min(p90s) - 1 if len(p90s) > 1 and min(p90s) > 0 else None


def record(result: Measurement, job, metric_info, place=None) -> dict:
    """The report's row for one job; `place`: where its first round ran (the device's
    times and whether it is an emulation)."""
    artifact, target, is_baseline = job.artifact, job.target, job.is_baseline
    measured_on = dict(result.measured_on)
    if place is not None and place.emulated and not measured_on.get("emulated"):
        measured_on["emulated"] = "the target says so (emulated: true)"
    metric = None
    if result.metric and metric_info:
        value = result.metric["value"]
        metric = {**result.metric, "baseline": metric_info["baseline"],
                  "baseline_model": "the source model as given",
                  "drop": metric_info["drop"](metric_info["baseline"], value)}
    return {
        "artifact": artifact.id, "format": artifact.format, "target": target,
        "baseline": is_baseline, "comparison": job.comparison,
        "engine": result.engine, "engine_choice": result.engine_choice,
        "runtime": result.runtime, "measured_on": measured_on,
        "latency_ms": result.latency_ms, "throughput_per_s": result.throughput_per_s,
        "runs": result.runs, "batch_size": result.batch_size,
        "peak_memory_mb": result.peak_rss_mb, "idle_memory_mb": result.idle_rss_mb,
        "model_memory_mb": result.model_rss_mb, "size_bytes": result.size_bytes,
        "energy_mj": result.energy_mj, "energy_note": result.energy_note,
        "runner_wall_s": result.wall_s, "load_ms": result.load_ms,
        "first_run_ms": result.first_run_ms, "power": result.power,
        "conditions": result.conditions, "placement": result.placement,
        "metric": metric, "torch_loaded": result.torch_loaded,
        "remote": place.times() if place is not None else None,
        "emulated": measured_on.get("emulated"),
    }
