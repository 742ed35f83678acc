"""How far a latency can be trusted: each round of a benchmark is a fresh runner process,
and the same file measures a few percent apart from one to the next. A record keeps its
rounds' p50s and p90s and an interval for its p90; two p90s whose intervals overlap are
as fast as each other (compress.report.decide ranks by it, compress compare reports a
change only beyond it)."""
from __future__ import annotations

import math
from typing import Optional, Sequence

from runtimes.measure import summarize_latencies

# Two p90s closer than this share are a tie even where the rounds agreed better: the same
# file measures 2-3.5 % apart from one runner process to the next (conformance models,
# examples/search/tie_spread.py, docs/search.md), and three rounds rarely show all of it.
TIE_RATIO = 0.03
# the least half-width of an interval, as a factor either side of the p90: two minimal
# intervals overlap exactly when the larger p90 is within TIE_RATIO of the smaller
_HALF = math.sqrt(1 + TIE_RATIO)
# an interval wider than this share of its p90 leaves a close decision to chance: the
# benchmark measures such variants again (at most EXTRA_ROUNDS more rounds)
TOO_WIDE = 0.25
EXTRA_ROUNDS = 2
# only a benchmark of at least the default rounds: fewer asked for a quick measurement
# (a smoke test, a test of the pipeline), with the runs it counts
SETTLE_FROM_ROUNDS = 3


def band(p90: float) -> tuple[float, float]:
    """The least interval of a p90: TIE_RATIO wide."""
    return p90 / _HALF, p90 * _HALF


def interval(p90: float, round_p90s: Sequence[float] = ()) -> tuple[float, float]:
    """The p90's interval: the rounds' lowest to highest p90, at least its band."""
    low, high = band(p90)
    return min(low, *round_p90s), max(high, *round_p90s)


def per_round(samples_by_round: Sequence[Sequence[float]], p90: float) -> dict:
    """report.json's latency_ms additions: p50_rounds, p90_rounds, p90_interval."""
    stats = [summarize_latencies(list(s)) for s in samples_by_round if len(s)]
    p90s = [row["p90"] for row in stats]
    return {"p50_rounds": [row["p50"] for row in stats], "p90_rounds": p90s,
            "p90_interval": list(interval(p90, p90s))}


def of_rounds(samples_by_round: Sequence[Sequence[float]]) -> dict:
    """report.json's latency_ms of a job's rounds: the pooled samples' statistics and
    per_round's additions (the one place a record's latencies are summarized)."""
    pooled = summarize_latencies([ms for s in samples_by_round for ms in s])
    return {**pooled, **per_round(samples_by_round, pooled["p90"])}


def of_record(latency: Optional[dict]) -> Optional[tuple[float, float]]:
    """A benchmark record's p90 interval; a record without one (a report from before
    intervals were kept, a language model's) gets its p90's band."""
    if not latency or latency.get("p90") is None:
        return None
    kept = latency.get("p90_interval")
    # a report is a file anyone may have edited: an interval that is not two finite
    # numbers in order is read as the p90's band
    if (isinstance(kept, (list, tuple)) and len(kept) == 2
            and all(isinstance(x, (int, float)) and math.isfinite(x) for x in kept)
            and kept[0] <= kept[1]):
        return float(kept[0]), float(kept[1])
    return band(float(latency["p90"]))


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def too_wide(span: tuple[float, float], p90: float) -> bool:
    return p90 > 0 and (span[1] - span[0]) > TOO_WIDE * p90


def to_settle(rows: dict[int, tuple[str, float, tuple[float, float]]]) -> list[int]:
    """Which measurements to time again before deciding: per target, the fastest and
    those whose interval overlaps its, when any of them is too wide to tell them apart.
    `rows`: index -> (target, p90, interval)."""
    again: list[int] = []
    for target in sorted({row[0] for row in rows.values()}):
        mine = {i: row for i, row in rows.items() if row[0] == target}
        leader = min(mine, key=lambda i: (mine[i][1], i))
        close = [i for i, row in mine.items() if overlap(row[2], mine[leader][2])]
        if len(close) > 1 and any(too_wide(mine[i][2], mine[i][1]) for i in close):
            again += sorted(close)
    return again


def close_calls(jobs: list, rounds: dict[int, list]) -> list[int]:
    """`to_settle` of a benchmark's jobs from their rounds so far (`rounds`: index ->
    runtimes Measurements of the jobs still timed); comparisons are never decided on."""
    rows = {}
    for index, mine in rounds.items():
        if mine and not jobs[index].comparison:
            latency = of_rounds([r.latency_samples_ms for r in mine])
            rows[index] = (jobs[index].target, latency["p90"], tuple(latency["p90_interval"]))
    return to_settle(rows)


def measure_close(state, measure_round, first_extra: int, note) -> None:
    """Before deciding: time again the close variants whose rounds spread too wide to tell
    them apart, at most EXTRA_ROUNDS more rounds (after `first_extra` rounds, at least
    SETTLE_FROM_ROUNDS). `state`: the benchmark's rounds (jobs, todo(), rounds, ctx);
    `measure_round(round_index, indices)` times those jobs once more."""
    for extra in range(EXTRA_ROUNDS if first_extra >= SETTLE_FROM_ROUNDS else 0):
        # a fleet's rounds rotate over its boards: their spread is the boards' own
        # (device_spread), which more rounds would not narrow
        again = close_calls(state.jobs, {i: state.rounds[i] for i in state.todo()
                                         if state.ctx.fleets[state.jobs[i].target].size == 1})
        if not again:
            return
        note(f"timing again {_named(state.jobs, again)}: p90s too close to rank, rounds "
             f"varying over {TOO_WIDE:.0%} (extra round {extra + 1} of at most {EXTRA_ROUNDS})")
        measure_round(first_extra + extra, again)


def _named(jobs: list, indices: list[int]) -> str:
    """The variants timed again, per target ("a, b on host-cpu; c on rpi4"); past three,
    their count: the line stays one line."""
    pairs = sorted({(jobs[i].target, jobs[i].artifact.id) for i in indices})
    if len(pairs) > 3:
        return f"{len(pairs)} variant/target pairs"
    targets = sorted({target for target, _ in pairs})
    return "; ".join(", ".join(a for t, a in pairs if t == target) + f" on {target}"
                     for target in targets)


def _how(rec: dict) -> tuple[str, str, str]:
    """Engine, machine and threads of a record, as text: a report is a file anyone may
    have edited, and these key a dict."""
    on, runtime = rec.get("measured_on"), rec.get("runtime")
    return (str(rec.get("engine")), str(on.get("hostname") if isinstance(on, dict) else None),
            str(runtime.get("threads") if isinstance(runtime, dict) else None))


def factors(timed) -> dict:
    """Per key: the widest (below, above) factors of an interval around its p90 among
    `timed`, rows of (key, p90, (low, high)); the key: engine, machine and threads."""
    found: dict = {}
    for key, p90, (low, high) in timed:
        below, above = found.get(key, (1.0, 1.0))
        found[key] = (max(below, p90 / low if low > 0 else 1.0),
                      max(above, high / p90 if p90 > 0 else 1.0))
    return found


def widen(p90: float, span: tuple[float, float],
          factor: tuple[float, float]) -> tuple[float, float]:
    """`span` at least as wide around `p90` as `factor` (below, above) of `factors`."""
    return min(span[0], p90 / factor[0]), max(span[1], p90 * factor[1])


def _timed(records: list[dict], machine_only: bool) -> list[tuple]:
    """((target, artifact), (key, p90, span)) of each timed record; the key: engine,
    machine and threads, or machine and threads alone."""
    timed = []
    for rec in records:
        span = of_record(rec.get("latency_ms"))
        p90 = span and float(rec["latency_ms"]["p90"])
        if p90 and p90 > 0 and span[0] > 0:
            key = _how(rec)[1:] if machine_only else _how(rec)
            timed.append(((rec.get("target"), rec.get("artifact")), (key, p90, span)))
    return timed


def widened(records: list[dict], also: list[dict] = (),
            machine_only: bool = False) -> dict[tuple[str, str], tuple[float, float]]:
    """(target, artifact) -> each timed record's interval, at least as wide for its p90 as
    the widest of those timed by the same engine, machine and threads (for any target:
    compress.report.ties reads Variants alike). `also`: records whose spread counts but
    whose intervals are not wanted (a run's engine baselines); `machine_only`: the widest
    on the same machine and threads whatever the engine, as two runs apart are compared
    (compress compare): what slows a machine between runs slows every engine on it."""
    timed = _timed(records, machine_only)
    widest = factors(row for _, row in [*timed, *_timed(list(also), machine_only)])
    return {pair: widen(p90, span, widest[key]) for pair, (key, p90, span) in timed}
