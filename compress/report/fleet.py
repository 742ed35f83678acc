"""report.md's "Device fleets": a target measured on several boards of one profile, how
the measurements were split, each board's own p90 beside the pooled one (the spread a
pooled verdict hides), and the boards that dropped out, with why."""
from __future__ import annotations

from compress.report.mdtext import md


def fleet_summaries(fleets: dict) -> dict:
    """report.json's `fleets`: {target: {devices, dropped}} for fleets and lost devices."""
    return {name: summary for name, fleet in fleets.items() if (summary := fleet.summary())}


def _device_cell(row: dict) -> str:
    return f"{md(row['device'])}: {row['p90']:.3f} ({row['rounds']})"


def fleet_lines(report: dict) -> list[str]:
    fleets = report.get("fleets") or {}
    if not fleets:
        return []
    lines = ["## Device fleets", "",
             "Each variant's rounds rotate over the target's boards; verdicts judge the "
             "pooled latencies. Per board: p90 ms (rounds timed there); spread: how much "
             "slower the slowest board's p90 is than the fastest's.", ""]
    for target, fleet in fleets.items():
        devices = ", ".join(md(d) for d in fleet["devices"]) or "none left"
        lines.append(f"- **{md(target)}**: measured on {devices}")
        lines += [f"  - dropped out: {md(d['device'])}: {md(d['reason'])}"
                  for d in fleet["dropped"]]
        rows = [b for b in report["benchmarks"] if b["target"] == target and b.get("devices")]
        if rows:
            lines += ["", "| variant | pooled p90 ms | per board | spread |", "|---|---|---|---|"]
            lines += [f"| {md(b['artifact'])} | {b['latency_ms']['p90']:.3f} | "
                      f"{'; '.join(_device_cell(r) for r in b['devices'])} | "
                      f"{_spread_text(b.get('device_spread'))} |" for b in rows]
        lines.append("")
    return lines


def _spread_text(value) -> str:
    return "— (one board)" if value is None else f"{value * 100:.1f} %"
