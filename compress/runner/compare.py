"""`compress compare A B`: what changed between two runs: settings, package versions,
numbers, verdicts and recommendations."""
from __future__ import annotations

from typing import Iterator

from compress.measure.noise import overlap, widened
from runtimes.safe_text import safe_text

# the numbers worth a line each, read from a benchmark record (one not timed has none)
_NUMBERS = (("p90 ms", lambda b: (b.get("latency_ms") or {}).get("p90")),
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
            label = item.get("name") or item.get("type")
            # a label read back from a file may be anything JSON holds
            yield from _flat(item, f"{prefix}[{index + 1}{f':{label}' if label else ''}]")
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


def _noise(x, y) -> str | None:
    """The words "within noise (...)" where the two p90s' intervals overlap (as the
    decision reads them, widened over the machine: noise.widened; a report without
    intervals: each p90's TIE_RATIO band), so a change there is not one; None beyond it
    or where either was not timed."""
    if x is None or y is None or not overlap(x, y):
        return None
    return f" within noise (A {x[0]:.4g}..{x[1]:.4g}, B {y[0]:.4g}..{y[1]:.4g})"


def _line(old: dict, new: dict, spans: tuple) -> tuple[str, bool]:
    """The numbers of one pair, and whether its p90 stayed within noise (`spans`: its
    two intervals, None where not timed)."""
    parts, quiet = [], _noise(*spans)
    for label, read in _NUMBERS:
        x, y = read(old), read(new)
        if x is not None or y is not None:
            said = quiet if label == "p90 ms" and quiet else _ratio(x, y)
            parts.append(f"{label} {_fmt(x)} -> {_fmt(y)}{said}")
    return ", ".join(parts), quiet is not None


def _numbers(a: dict, b: dict) -> list[str]:
    old = {(x["target"], x["artifact"]): x for x in a.get("benchmarks", [])}
    new = {(x["target"], x["artifact"]): x for x in b.get("benchmarks", [])}
    lines, quiet = [], 0
    # each run's intervals as wide as the widest any engine showed on its machine: two
    # runs apart differ by what a machine does between them, more than within one
    spans = tuple(widened(r.get("benchmarks", []), r.get("engine_baselines") or [],
                          machine_only=True) for r in (a, b))
    for pair in sorted(set(old) | set(new)):
        if pair not in old or pair not in new:
            lines.append(f"  {pair[0]} {pair[1]}: {'only in B' if pair in new else 'only in A'}")
            continue
        text, within = _line(old[pair], new[pair], (spans[0].get(pair), spans[1].get(pair)))
        quiet += within
        lines.append(f"  {pair[0]} {pair[1]}: {text}")
    if quiet:
        lines.append(f"  {quiet} p90 latenc{'y' if quiet == 1 else 'ies'} within noise "
                     "(the two runs' intervals overlap: not a change)")
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
