"""A run's verdicts, and which of them decide its exit code."""
from __future__ import annotations

from profiles import (NO_METER, OFF_TARGET, PASS, UNMEASURED, check,
                      unmeasured_language_verdicts, unmeasured_verdicts)

from runtimes.lm.formats import NAMES as LANGUAGE_FORMATS   # judged by language_model


def verdicts_of(benchmarks: list[dict], skipped: list[dict], artifacts, targets) -> list:
    """Every measured pair's verdicts, and those of the pairs left unmeasured (with what
    is known of them: the file's size, a metric measured on another target)."""
    profiles = dict(targets)
    verdicts = []
    for bench in benchmarks:
        verdicts.extend(check(bench, profiles[bench["target"]], bench["artifact"], bench["target"]))
    sizes = {a.id: a.size_bytes for a in artifacts}
    language = {a.id for a in artifacts if a.format in LANGUAGE_FORMATS}
    for miss in (s for s in skipped if s.get("unmeasured")):
        judge = (unmeasured_language_verdicts if miss["artifact"] in language
                 else unmeasured_verdicts)
        verdicts.extend(judge(profiles[miss["target"]], miss["artifact"], miss["target"],
                              miss["reason"], sizes[miss["artifact"]],
                              {"accuracy_drop": miss.get("drop")}))
    return verdicts


def gated_verdicts(verdicts, benchmarks: list[dict], gated: set, skipped=()) -> list:
    """Verdicts that decide the exit code: candidates (not the baseline) on gated targets."""
    baselines = {b["artifact"] for b in [*benchmarks, *skipped] if b.get("baseline")}
    return [v for v in verdicts if v.target in gated and v.artifact not in baselines]


def passed(verdicts, strict: bool) -> bool:
    # no-meter: a budget its profile judges only where a meter is (power.required: false)
    ok = (PASS, NO_METER) if strict else (PASS, NO_METER, UNMEASURED, OFF_TARGET)
    return all(v.status in ok for v in verdicts)
