"""One benchmark record from a job's rounds: latencies pooled, power and energy averaged,
the metric and where it was measured (what report.json's `benchmarks` hold)."""
from __future__ import annotations

import statistics

from runtimes.measure import summarize_latencies


def _pool_power(rounds: list[dict]) -> dict:
    """Power and energy over rounds: means of the rounds that measured them; the
    conditions before the first and after the last round, with every warning."""
    pooled = {}
    energies = [r["energy_mj"] for r in rounds if r.get("energy_mj") is not None]
    pooled["energy_mj"] = statistics.fmean(energies) if energies else None
    powers = [r["power"] for r in rounds if r.get("power")]
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
    conditions = [r["conditions"] for r in rounds if r.get("conditions")]
    if conditions:
        pooled["conditions"] = {
            **conditions[0], "after": conditions[-1].get("after"),
            "warnings": sorted({w for c in conditions for w in c.get("warnings") or []})}
    return pooled


def pool_rounds(rounds: list[dict]) -> dict:
    """One result from several rounds: latencies pooled, worst memory, first metric."""
    pooled = {**rounds[0], **_pool_power(rounds)}
    samples = [ms for r in rounds for ms in r.pop("latency_samples_ms")]
    pooled.update(
        latency_ms=summarize_latencies(samples), runs=len(samples),
        throughput_per_s=pooled["batch_size"] * len(samples) / sum(r["window_s"] for r in rounds),
        peak_rss_mb=max(r["peak_rss_mb"] for r in rounds),
        model_rss_mb=max(r["model_rss_mb"] for r in rounds),
        wall_s=statistics.median(r["wall_s"] for r in rounds),
        # each round is a fresh process: its load and first call, the median of them
        **{key: statistics.median(r[key] for r in rounds)
           for key in ("load_ms", "first_run_ms") if all(key in r for r in rounds)})
    return pooled


def record(result: dict, job, metric_info, host=None) -> dict:
    artifact, target, is_baseline = job.artifact, job.target, job.is_baseline
    measured_on = dict(result["measured_on"])
    if host and host.spec.emulated and not measured_on.get("emulated"):
        measured_on["emulated"] = "the target says so (emulated: true)"
    metric = None
    if result.get("metric") and metric_info:
        value = result["metric"]["value"]
        metric = {**result["metric"], "baseline": metric_info["baseline"],
                  "baseline_model": "the source model as given",
                  "drop": metric_info["drop"](metric_info["baseline"], value)}
    return {
        "artifact": artifact.id, "format": artifact.format, "target": target,
        "baseline": is_baseline, "comparison": job.comparison,
        "engine": result["runtime"]["engine"], "engine_choice": result.get("engine_choice"),
        "runtime": result["runtime"], "measured_on": measured_on,
        "latency_ms": result["latency_ms"], "throughput_per_s": result["throughput_per_s"],
        "runs": result["runs"], "batch_size": result["batch_size"],
        "peak_memory_mb": result["peak_rss_mb"], "idle_memory_mb": result["idle_rss_mb"],
        "model_memory_mb": result["model_rss_mb"], "size_bytes": result["size_bytes"],
        "energy_mj": result["energy_mj"], "energy_note": result["energy_note"],
        "runner_wall_s": result["wall_s"],
        # a device's older runner may not say them
        "load_ms": result.get("load_ms"), "first_run_ms": result.get("first_run_ms"),
        "power": result.get("power"), "conditions": result.get("conditions"),
        "placement": result.get("placement"),
        "metric": metric, "torch_loaded": result["torch_loaded"],
        "remote": {"host": str(host.spec.ssh.address), **host.times.to_dict()} if host else None,
        "emulated": measured_on.get("emulated"),
    }
