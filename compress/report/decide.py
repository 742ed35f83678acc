"""Decide what to ship: per target, the fastest variant meeting every budget, the Pareto
front, and, when nothing fits, the closest miss. Pure: no I/O (recommend.feeding reads the
files' input details; compress.report.recommend puts the two together for a report).

The rules, in order:
1. A variant is feasible on a target when none of its verdicts there fails and its
   latency was measured. Verdicts measured off the device, or left unmeasured (energy
   without a meter), do not fail it: such a winner is a *candidate*, not a pass.
2. Among feasible variants the fastest p90 wins (a language model's: the p90 of one
   decode step, the time per generated token). Variants whose p90 intervals (their
   rounds' spread, at least TIE_RATIO wide, and as wide as the widest its engine showed
   on the same machine: compress.measure.noise, compress.report.ties) overlap the fastest
   one's are a tie, broken by the smaller file, then the smaller metric drop, then the
   integer precision, then the name (compress.report.ties).
3. Nothing feasible: the closest miss is the variant whose worst overrun (value / limit,
   over its failed budgets) is smallest, with every miss and by how much. A variant whose
   runner was killed on the target failed every budget there with no number: it is as
   far off as can be, and said by why it did not run.
The Pareto front is taken over (p90, metric drop, file size), lower being better.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from compress.measure.noise import of_record
from compress.report import ties
from profiles import AT_LEAST, NO_METER, PASS, UNITS

SHIP, CANDIDATE, NOTHING_FITS, UNMEASURED = "ship", "candidate", "nothing fits", "unmeasured"
UNJUDGED = "not judged"   # no verdict at all on the target: no benchmark stage asked


@dataclass(frozen=True)
class Variant:
    """One artifact judged for one target: its numbers and its verdicts there."""
    artifact: str
    target: str
    baseline: bool
    model_size_mb: float
    verdicts: tuple[dict, ...]           # Verdict.to_dict() rows of this pair
    latency_p90_ms: Optional[float] = None
    peak_memory_mb: Optional[float] = None
    metric: Optional[dict] = None        # {name, value}
    drop: Optional[float] = None
    engine: Optional[str] = None
    files: dict = field(default_factory=dict)   # format, precision, path, feeding
    threads: Optional[int] = None
    language_model: Optional[dict] = None        # a language model's record part
    p90_interval: Optional[tuple[float, float]] = None   # its rounds' spread (None: band)
    machine: Optional[str] = None        # the host that timed it (measured_on.hostname)

    def failed(self) -> list[dict]:
        return [v for v in self.verdicts if v["status"] == "fail"]

    @property
    def feasible(self) -> bool:
        return self.latency_p90_ms is not None and not self.failed()


def variants_of(benchmarks: list[dict], verdicts: list[dict], sizes: dict[str, int],
                files: dict[str, dict]) -> list[Variant]:
    """A Variant per measured pair, and per pair judged without timing (over a budget
    checked first, or its accelerator not here): those have verdicts but no latency."""
    by_pair: dict[tuple, list[dict]] = {}
    for verdict in verdicts:
        by_pair.setdefault((verdict["artifact"], verdict["target"]), []).append(verdict)
    found, seen = [], set()
    for bench in benchmarks:
        pair = (bench["artifact"], bench["target"])
        seen.add(pair)
        metric = bench.get("metric") or None
        found.append(Variant(
            bench["artifact"], bench["target"], bench["baseline"],
            bench["size_bytes"] / 2**20, tuple(by_pair.get(pair, ())),
            bench["latency_ms"]["p90"], bench.get("peak_memory_mb"),
            {"name": metric["name"], "value": metric["value"]} if metric else None,
            metric.get("drop") if metric else None, bench.get("engine"),
            files.get(bench["artifact"], {}), (bench.get("runtime") or {}).get("threads"),
            bench.get("language_model"), of_record(bench["latency_ms"]),
            (bench.get("measured_on") or {}).get("hostname")))
    for (artifact, target), rows in by_pair.items():
        if (artifact, target) not in seen and artifact in sizes:
            found.append(Variant(artifact, target, bool(files.get(artifact, {}).get("baseline")),
                                 sizes[artifact] / 2**20, tuple(rows),
                                 files=files.get(artifact, {})))
    return found


def over_ratio(value: float, limit: float) -> float:
    """How far over its limit a value is, as a share of the limit (a limit of 0, which
    an accuracy budget may be, makes any excess infinitely far)."""
    if limit > 0:
        return value / limit - 1
    return math.inf if value > limit else 0.0


def _miss(verdict: dict) -> tuple[float, float]:
    """How far a failed verdict is from its limit: (as a share of it, by how much). A
    value under a minimum (decode tokens/s) is as far off as one over a maximum; a
    variant that did not run there (its runner killed: no number) as far as can be."""
    value, limit = verdict["value"], verdict["budget"]
    if value is None:
        return math.inf, math.inf
    if verdict["metric"] in AT_LEAST:
        return (limit / value - 1 if value > 0 else math.inf), limit - value
    return over_ratio(value, limit), value - limit


def _overrun(variant: Variant) -> float:
    return max(_miss(v)[0] for v in variant.failed())


def closest_miss(variants: list[Variant]) -> Optional[dict]:
    missing = [v for v in variants if v.failed()]
    if not missing:
        return None
    best = min(missing, key=lambda v: (_overrun(v), sum(_miss(x)[1] for x in v.failed()),
                                       v.latency_p90_ms is None))
    return {"artifact": best.artifact, "misses": [
        {"budget": v["metric"], "value": v["value"], "limit": v["budget"],
         "over_by": _finite(_miss(v)[1]), "over_by_ratio": _finite(_miss(v)[0]),
         **({"reason": v["reason"]} if v["value"] is None else {})}
        for v in best.failed()]}


def _finite(value: float) -> Optional[float]:
    return None if math.isinf(value) else value   # JSON has no infinity


def _dominates(a: tuple, b: tuple) -> bool:
    return all(x <= y for x, y in zip(a, b)) and a != b


def pareto_front(variants: list[Variant]) -> list[str]:
    """Artifacts no other variant beats on every one of p90, drop and size."""
    timed = [v for v in variants if v.latency_p90_ms is not None]
    point = {v.artifact: (v.latency_p90_ms, v.drop or 0.0, v.model_size_mb) for v in timed}
    return [v.artifact for v in timed
            if not any(_dominates(point[o.artifact], point[v.artifact]) for o in timed)]


# verdicts that leave nothing to check on the device: a pass, and an energy budget where
# the profile says a meter-less machine has none to judge (profiles.check's NO_METER)
_SETTLED = (PASS, NO_METER)


def _status(winner: Variant) -> str:
    settled = all(v["status"] in _SETTLED for v in winner.verdicts)
    return SHIP if settled else CANDIDATE


def _why(ranked: list[Variant], tied: int, total: int, noise: dict) -> str:
    if len(ranked) == 1:
        return f"the only one of {total} variants measured here meeting every budget"
    runner_up = ranked[1]
    if tied > 1:
        return (f"{ties.why_tied(ranked, tied, noise)}; {len(ranked)} of {total} variants "
                "meet every budget")
    return (f"the fastest p90 of the {len(ranked)} variants meeting every budget "
            f"({total} judged); next: {runner_up.artifact} at "
            f"{runner_up.latency_p90_ms:.3g} ms")


def recommend(target: str, variants: list[Variant]) -> dict:
    """The recommendation for one target from its variants (see the module's rules)."""
    mine = [v for v in variants if v.target == target]
    feasible = [v for v in mine if v.feasible]
    base = {"target": target, "closest_miss": None}
    if not mine:
        return {**base, **_empty(), "status": UNJUDGED,
                "why": "nothing was judged on this target (the pipeline has no benchmark)"}
    if not feasible:
        status = NOTHING_FITS if any(v.failed() for v in mine) else UNMEASURED
        return {**base, **_empty(), "status": status, "closest_miss": closest_miss(mine),
                "why": ("no variant meets every budget" if status == NOTHING_FITS else
                        "no variant was measured on this target" + _unmeasured_why(mine))}
    noise = ties.engine_noise([v for v in variants if v.latency_p90_ms is not None])
    ranked, tied = ties.rank(feasible, noise)
    winner = ranked[0]
    off = next((v["reason"] for v in winner.verdicts if v["status"] == "off-target"), None)
    return {**base, "status": _status(winner), "artifact": winner.artifact,
            "baseline": winner.baseline, "path": winner.files.get("path"),
            "engine": winner.engine, "threads": winner.threads,
            "format": winner.files.get("format"),
            "precision": winner.files.get("precision"), "why": _why(ranked, tied, len(mine), noise),
            "latency_p90_ms": winner.latency_p90_ms,
            "latency_p90_interval_ms": list(ties.span(winner, noise)),
            "peak_memory_mb": winner.peak_memory_mb,
            "model_size_mb": winner.model_size_mb, "metric": winner.metric, "drop": winner.drop,
            "measured_on_device": off is None, "off_target_reason": off,
            "unmeasured": sorted(v["metric"] for v in winner.verdicts
                                 if v["status"] == "unmeasured"),
            "language_model": winner.language_model,
            "feeding": winner.files.get("feeding")}


def _unmeasured_why(variants: list[Variant]) -> str:
    """Why a target's latency has no number (its accelerator not here, ...), once."""
    reasons = [v["reason"] for x in variants for v in x.verdicts
               if v["metric"] in ("latency_p90_ms", "decode_tokens_per_s") and v["reason"]]
    return f": {reasons[0]}" if reasons else ""


def _empty() -> dict:
    return dict.fromkeys(("artifact", "baseline", "path", "engine", "threads", "format",
                          "precision", "latency_p90_ms", "latency_p90_interval_ms",
                          "peak_memory_mb", "model_size_mb", "metric",
                          "drop", "measured_on_device", "off_target_reason", "feeding",
                          "language_model"))


def _feeding_text(feeding: Optional[dict]) -> str:
    if not feeding:
        return ""
    # not a 4-D image input (or one whose axes do not say): its shape, e.g. [1, 64, 40]
    shape = f"[{', '.join('?' if d is None else str(d) for d in feeding.get('shape') or ())}]"
    text = f"{feeding.get('layout') or shape} {feeding['dtype']} input"
    if feeding.get("scale") is not None:
        text += f", input scale {feeding['scale']:.4g} zero point {feeding['zero_point']}"
    return text


def _lm_numbers(rec: dict, limits: dict) -> str:
    """A language model's: decode speed, time to first token, size, memory, quality."""
    lm, parts = rec["language_model"], []
    for key, value, label in (
            ("decode_tokens_per_s", lm["decode_tok_s"], "decode"),
            ("time_to_first_token_ms", lm["ttft_ms"], "first token"),
            ("model_size_mb", rec["model_size_mb"], "weights"),
            ("peak_memory_mb", rec["peak_memory_mb"], "peak memory")):
        of = f" ({'at least' if key in AT_LEAST else 'of'} {limits[key]:g})" if key in limits else ""
        parts.append(f"{label} {value:.3g} {UNITS[key]}{of}")
    of = f" (of +{limits['perplexity_increase']:.0%})" if "perplexity_increase" in limits else ""
    parts.append(f"perplexity {rec['drop']:+.2%}{of}")
    return ", ".join(parts)


def _numbers(rec: dict, limits: dict) -> str:
    if rec.get("language_model"):
        return _lm_numbers(rec, limits)
    parts = []
    for key, value, label in (("latency_p90_ms", rec["latency_p90_ms"], "p90"),
                              ("model_size_mb", rec["model_size_mb"], "size"),
                              ("peak_memory_mb", rec["peak_memory_mb"], "peak memory")):
        if value is not None:
            of = f" of {limits[key]:g}" if key in limits else ""
            parts.append(f"{label} {value:.3g}{of} {UNITS[key]}")
    if rec["drop"] is not None:
        of = f" of {limits['accuracy_drop']:g}" if "accuracy_drop" in limits else ""
        parts.append(f"{rec['metric']['name']} drop {rec['drop']:.4g}{of}")
    return ", ".join(parts)


def miss_side(miss: dict) -> str:
    """Where a missed value lies: under a minimum (decode tokens/s), over a maximum."""
    return "under" if miss["budget"] in AT_LEAST else "over"


def _misses(miss: dict) -> str:
    """The closest miss's budgets and by how much; once, why it has no number where its
    runner did not run on the target."""
    numbers = [f"{m['budget']} {m['value']:.4g} {miss_side(m)} {m['limit']:g} by "
               + (f"{m['over_by_ratio']:.0%}" if m["over_by_ratio"] is not None
                  else f"{m['over_by']:.4g}") for m in miss["misses"] if m["value"] is not None]
    return "; ".join([*numbers, *dict.fromkeys(m["reason"] for m in miss["misses"]
                                                if m["value"] is None)])


def summary(rec: dict, limits: dict, shown_path: Optional[str] = None) -> str:
    """The recommendation in one sentence, with its numbers and where they come from."""
    target = rec["target"]
    if rec["status"] in (UNMEASURED, UNJUDGED):
        return f"{target}: {rec['why']}"
    if rec["status"] == NOTHING_FITS:
        miss = rec["closest_miss"]
        return f"{target}: nothing fits; closest: {miss['artifact']} ({_misses(miss)})"
    what = ", ".join(p for p in (f"{rec['format']} {rec['precision']}",
                                 _feeding_text(rec["feeding"]), f"on {rec['engine']}"
                                 + (f", {rec['threads']} thread{'s' if rec['threads'] > 1 else ''}"
                                    if rec.get("threads") else ""))
                     if p)
    text = (f"{target}: {'ship' if rec['status'] == SHIP else 'candidate'} "
            f"{shown_path or rec['path'] or rec['artifact']} ({what}): {_numbers(rec, limits)}")
    if rec["off_target_reason"]:
        return text + f"; measured off the device ({rec['off_target_reason']}): a candidate, " \
                      "not a pass"
    if rec["unmeasured"]:
        return text + f"; measured on the device, {', '.join(rec['unmeasured'])} unmeasured"
    return text + "; measured on the device"
