"""The human-readable report of `python -m runtimes bench` (without --json)."""
from __future__ import annotations

from runtimes.safe_text import safe_text


def _say(line: str) -> None:
    """One line of the report: its fields (the model's path, a warning, a meter's detail,
    an engine's error) come from outside and must not drive the terminal."""
    print(safe_text(line, multiline=False))


def print_human(result: dict) -> None:
    lat = result["latency_ms"]
    runtime = result["runtime"]
    engine = runtime["engine"] + (f" {runtime['precision']}" if runtime.get("precision") else "")
    _say(f"{result['model']}  ({result['size_bytes'] / 2**20:.2f} MiB, "
          f"{engine}, threads={runtime.get('threads')})")
    if result.get("engine_choice"):
        probes = ", ".join(f"{p['engine']} p50 {p['p50_ms']:.3f} ms" if "p50_ms" in p else
                           f"{p['engine']}: {p['error']}" for p in result["engine_choice"]["probes"])
        _say(f"  engine      auto chose {result['engine_choice']['chosen']} ({probes})")
    _say(f"  latency ms  p50 {lat['p50']:.3f}  p90 {lat['p90']:.3f}  p99 {lat['p99']:.3f}  "
          f"mean {lat['mean']:.3f}  std {lat['std']:.3f}  ({result['runs']} runs)")
    cache = runtime.get("xnnpack_weight_cache")
    cached = f" (XNNPACK weight cache {'hit' if cache['hit'] else 'written'})" if cache else ""
    _say(f"  load        {result['load_ms']:.1f} ms{cached}, first inference "
          f"{result['first_run_ms']:.3f} ms")
    _say(f"  throughput  {result['throughput_per_s']:.1f}/s   peak RSS "
          f"{result['peak_rss_mb']:.1f} MB (idle {result['idle_rss_mb']:.1f} MB)")
    _print_energy(result)
    for warning in result["conditions"]["warnings"]:
        _say(f"  warning     {warning}")
    if result["metric"]:
        m = result["metric"]
        _say(f"  {m['name']:<11} {m['value']:.4f} on {m['samples']} feeds")
    if result.get("placement"):
        from runtimes.placement import describe
        _say(f"  placement   {describe(result['placement'])}")


def _print_energy(result: dict) -> None:
    power = result["power"]
    if result["energy_mj"] is not None:
        _say(f"  energy      {result['energy_mj']:.4g} mJ/inference (net of idle)")
    else:
        _say(f"  energy      unmeasured: {result['energy_note']}")
    if power is None:
        return
    watts = "  ".join(f"{label} {power[key]:.3f} W" for label, key in
                      (("mean", "mean_w"), ("idle", "idle_w"), ("active", "active_w"))
                      if power[key] is not None)
    rate = power["sample_rate_hz"]
    _say(f"  power       {watts or 'unmeasured'}  over {power['window_s']:.2f} s")
    _say(f"  meter       {power['meter']}: {power['detail']}, "
          f"{f'{rate:.1f}' if rate is not None else '?'} samples/s ({power['samples']} samples)")
    if power.get("note") and result["energy_mj"] is not None:
        _say(f"  note        {power['note']}")
