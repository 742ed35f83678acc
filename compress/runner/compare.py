"""`compress compare A B`: what changed between two runs: settings, package versions,
numbers, verdicts and recommendations."""
from __future__ import annotations

from typing import Iterator

from runtimes.safe_text import safe_text

# the numbers worth a line each, read from a benchmark record
_NUMBERS = (("p90 ms", lambda b: b["latency_ms"]["p90"]),
            ("peak MB", lambda b: b.get("peak_memory_mb")),
            ("size MB", lambda b: b["size_bytes"] / 2**20),
            ("metric", lambda b: (b.get("metric") or {}).get("value")),
            ("drop", lambda b: (b.get("metric") or {}).get("drop")))


def _flat(value, prefix: str = "") -> Iterator[tuple[str, object]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flat(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for index, item in enumerate(value):
            label = item.get("name") or item.get("type") if isinstance(item, dict) else None
            yield from _flat(item, f"{prefix}[{index + 1}{':' + label if label else ''}]")
    else:
        yield prefix, value


def _changed(a: dict, b: dict) -> list[str]:
    fa, fb = dict(_flat(a)), dict(_flat(b))
    return [f"  {key}: {fa.get(key, '(unset)')} -> {fb.get(key, '(unset)')}"
            for key in sorted(set(fa) | set(fb)) if fa.get(key) != fb.get(key)]


def _ratio(old, new) -> str:
    if not isinstance(old, (int, float)) or not isinstance(new, (int, float)) or not old:
        return ""
    return f" ({(new - old) / abs(old):+.0%})"


def _numbers(a: dict, b: dict) -> list[str]:
    old = {(x["target"], x["artifact"]): x for x in a.get("benchmarks", [])}
    new = {(x["target"], x["artifact"]): x for x in b.get("benchmarks", [])}
    lines = []
    for pair in sorted(set(old) | set(new)):
        if pair not in old or pair not in new:
            lines.append(f"  {pair[0]} {pair[1]}: {'only in B' if pair in new else 'only in A'}")
            continue
        parts = []
        for label, read in _NUMBERS:
            x, y = read(old[pair]), read(new[pair])
            if x is not None or y is not None:
                parts.append(f"{label} {_fmt(x)} -> {_fmt(y)}{_ratio(x, y)}")
        lines.append(f"  {pair[0]} {pair[1]}: " + ", ".join(parts))
    return lines


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def _verdicts(a: dict, b: dict) -> list[str]:
    def keyed(report):
        return {(v["target"], v["artifact"], v["metric"]): v["status"]
                for v in report.get("verdicts", [])}
    old, new = keyed(a), keyed(b)
    return [f"  {t} {art} {metric}: {old.get((t, art, metric), '—')} -> "
            f"{new.get((t, art, metric), '—')}"
            for t, art, metric in sorted(set(old) | set(new))
            if old.get((t, art, metric)) != new.get((t, art, metric))]


def _recommendations(a: dict, b: dict) -> list[str]:
    old = {r["target"]: r for r in a.get("recommendations", [])}
    new = {r["target"]: r for r in b.get("recommendations", [])}
    lines = []
    for target in sorted(set(old) | set(new)):
        x, y = old.get(target, {}), new.get(target, {})
        if (x.get("artifact"), x.get("status")) != (y.get("artifact"), y.get("status")):
            lines.append(f"  {target}: {x.get('status', '—')} {x.get('artifact') or ''} -> "
                         f"{y.get('status', '—')} {y.get('artifact') or ''}")
    return lines


def compare(a: dict, b: dict) -> list[str]:
    """Lines saying what differs from run A to run B (sections with no change say so),
    safe to print."""
    configs = [r["pipeline"].get("config") for r in (a, b)]
    settings = (_changed(*configs) if all(configs) else
                ["  not recorded in " + " and ".join(n for n, c in zip("AB", configs) if not c)
                 + " (a report from before runs kept their settings)"])
    sections = (
        ("settings", settings),
        ("package versions", _changed(a["manifest"]["packages"], b["manifest"]["packages"])),
        ("numbers (target, artifact: A -> B)", _numbers(a, b)),
        ("verdicts", _verdicts(a, b)),
        ("recommendations", _recommendations(a, b)),
        ("passed", [f"  {a['passed']} -> {b['passed']}"] if a["passed"] != b["passed"] else []))
    lines = []
    for title, body in sections:
        lines += [f"{title}:"] + (body or ["  unchanged"])
    # the reports are files that anyone may have edited: a value shown must not drive
    # the terminal or start a line of its own
    return [safe_text(line, multiline=False) for line in lines]
