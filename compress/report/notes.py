"""What the report says once instead of on every row: why budgets have no number (per
target, or across targets where a missing power meter is the reason), and which
measurements were too noisy to trust. Pure: dicts in, dicts out."""
from __future__ import annotations

from typing import Optional

from profiles import NO_METER, UNMEASURED
from profiles.check import METERED, NO_METER_REASON

NO_NUMBER = (UNMEASURED, NO_METER)   # verdict statuses that come with a reason, not a value

# A measurement is noisy when its slow runs are far from its typical one: the tail (p99)
# past NOISY_P99_RATIO times the median, or the gated figure itself (p90, what budgets
# read) past NOISY_P90_RATIO times it. Both compare percentiles, not the standard
# deviation, which one stray run inflates as much while being harder to read in ms.
NOISY_P99_RATIO = 3.0
NOISY_P90_RATIO = 1.5
# ...and the slow runs are slower than the median by at least this much. Below half a
# millisecond the spread is interrupts, caches and timer granularity that every machine
# has and closing programs does not remove (a 0.01 ms model shows p99 at 10x its median
# on an idle machine); another program taking the CPU costs a whole scheduler time
# slice, milliseconds.
NOISY_MIN_EXCESS_MS = 0.5


def noisy_reason(latency_ms: dict) -> Optional[str]:
    """'p99 7.9 ms is 4.1x the median 1.9 ms' when a latency summary is noisy, else None."""
    median = latency_ms.get("p50")
    if not median or median <= 0:
        return None
    for name, limit in (("p99", NOISY_P99_RATIO), ("p90", NOISY_P90_RATIO)):
        value = latency_ms.get(name)
        if value is not None and value > limit * median \
                and value - median >= NOISY_MIN_EXCESS_MS:
            return (f"{name} {value:.3g} ms is {value / median:.1f}x the median "
                    f"{median:.3g} ms")
    return None


def mark_noisy(records: list[dict]) -> None:
    """Give each measured record whose latencies are noisy `noisy: <why, with numbers>`."""
    for record in records:
        why = noisy_reason(record["latency_ms"]) if record.get("latency_ms") else None
        if why:
            record["noisy"] = why


def reason_groups(verdicts: list[dict]) -> list[dict]:
    """Budgets without a number, grouped: {target, status, reason, budgets, artifacts,
    every}, one group per target, status, reason and set of budgets (`every`: on every
    variant judged for the target), in the order the verdicts came."""
    judged: dict[str, list[str]] = {}
    per_variant: dict[tuple, list[str]] = {}   # (target, status, reason, artifact) -> budgets
    for v in verdicts:
        judged.setdefault(v["target"], [])
        if v["artifact"] not in judged[v["target"]]:
            judged[v["target"]].append(v["artifact"])
        if v["status"] in NO_NUMBER:
            key = (v["target"], v["status"], v["reason"], v["artifact"])
            per_variant.setdefault(key, []).append(v["metric"])
    groups: dict[tuple, dict] = {}
    for (target, status, reason, artifact), budgets in per_variant.items():
        groups.setdefault((target, status, reason, tuple(budgets)), {
            "target": target, "status": status, "reason": reason, "budgets": budgets,
            "artifacts": []})["artifacts"].append(artifact)
    for group in groups.values():
        group["every"] = set(group["artifacts"]) == set(judged[group["target"]])
    return list(groups.values())


def _headline(group: dict) -> str:
    """A metered budget's reason as every target says it: no-meter adds where the budget
    applies, which its status (and the report's glossary) already says."""
    return group["reason"].removesuffix(f"; {NO_METER_REASON}")


def footnote_groups(verdicts: list[dict]) -> list[dict]:
    """reason_groups, those of energy and power budgets merged across targets when they
    give the same reason (one machine without a meter measured several targets):
    {budgets, reason, metered, parts: the reason_groups merged}, in the verdicts' order.
    Any other reason stays one per target, as reason_groups gives it."""
    merged: dict[tuple, dict] = {}
    for group in reason_groups(verdicts):
        metered = all(budget in METERED for budget in group["budgets"])
        reason = _headline(group) if metered else group["reason"]
        key = ((tuple(group["budgets"]), reason) if metered else
               (group["target"], group["status"], reason, tuple(group["budgets"])))
        merged.setdefault(key, {"budgets": group["budgets"], "reason": reason,
                                "metered": metered, "parts": []})["parts"].append(group)
    return list(merged.values())


def unmeasured_reasons(verdicts: list[dict]) -> dict:
    """{target: {budget: reason}} for the budgets with no number. A budget whose reason
    differs between variants gets 'artifact, artifact: reason; artifact: reason'."""
    by_budget: dict[str, dict[str, list[dict]]] = {}
    for group in reason_groups(verdicts):
        for budget in group["budgets"]:
            by_budget.setdefault(group["target"], {}).setdefault(budget, []).append(group)
    return {target: {budget: (found[0]["reason"] if len(found) == 1 else "; ".join(
                         f"{', '.join(g['artifacts'])}: {g['reason']}" for g in found))
                     for budget, found in budgets.items()}
            for target, budgets in by_budget.items()}


def machine_text(on: dict, esc=str) -> str:
    """The machine a measurement ran on, in words; `esc` makes names literal for the
    page's format (Markdown's md, or none where the caller escapes whole cells)."""
    return (f"{esc(on.get('device_model') or on.get('cpu'))} ({esc(on.get('arch'))}, "
            f"{on.get('cores')} cores, host {esc(on.get('hostname'))})")


def how_measured(remote: dict | None, esc=str) -> str:
    """Here, or over SSH with what the connection, copy and round trips cost."""
    if not remote:
        return "on this machine"
    return (f"over SSH ({esc(remote['host'])}): connect {remote['connect_s']:.2f} s, copy "
            f"{remote['copied_bytes'] / 2**20:.2f} MiB in {remote['copy_s']:.2f} s, runner "
            f"round trip {remote['run_s_median']:.2f} s median over {remote['runs']} runs, "
            f"clean-up {remote['cleanup_s']:.2f} s")


def hottest(snapshot: dict) -> float | None:
    """The hottest thermal zone of a conditions snapshot in °C, None where none was read."""
    temps = [zone.get("temp_c") for zone in (snapshot.get("thermal") or {}).values()]
    temps = [t for t in temps if t is not None]
    return max(temps) if temps else None


def machine_of(bench: dict) -> str:
    """The machine a benchmark ran on and how it was reached, without the run's timings
    (the same for every benchmark there): what report.md and report.html group by."""
    remote = bench.get("remote")
    return (machine_text(bench.get("measured_on") or {})
            + (f", over SSH ({remote['host']})" if remote else ", on this machine"))
