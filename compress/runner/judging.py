"""A run's verdicts, and which of them decide its exit code."""
from __future__ import annotations

from profiles import (NO_METER, OFF_TARGET, PASS, UNMEASURED, check,
                      unmeasured_language_verdicts, unmeasured_verdicts)
from profiles.check import did_not_run_verdicts

from runtimes.lm.formats import NAMES as LANGUAGE_FORMATS   # judged by language_model


def verdicts_of(benchmarks: list[dict], skipped: list[dict], artifacts, targets) -> list:
    """Every measured pair's verdicts, those of the pairs left unmeasured (with what is
    known of them: the file's size, a metric measured on another target), and those of
    the pairs whose runner was killed there (`died`: every budget failed, with why)."""
    profiles = dict(targets)
    verdicts = []
    for bench in benchmarks:
        verdicts.extend(check(bench, profiles[bench["target"]], bench["artifact"], bench["target"]))
    sizes = {a.id: a.size_bytes for a in artifacts}
    language = {a.id for a in artifacts if a.format in LANGUAGE_FORMATS}
    for miss in skipped:
        profile, artifact, target = profiles[miss["target"]], miss["artifact"], miss["target"]
        if miss.get("died"):   # the variant did not fit the device: failed, not unmeasured
            verdicts.extend(did_not_run_verdicts(profile, artifact, target, miss["reason"],
                                                 artifact in language))
        elif miss.get("unmeasured"):
            judge = (unmeasured_language_verdicts if artifact in language
                     else unmeasured_verdicts)
            verdicts.extend(judge(profile, artifact, target, miss["reason"], sizes[artifact],
                                  {"accuracy_drop": miss.get("drop")}))
    return verdicts


def gated_verdicts(verdicts, benchmarks: list[dict], gated: set, skipped=()) -> list:
    """Verdicts that decide the exit code: candidates (not the baseline) on gated targets."""
    baselines = {b["artifact"] for b in [*benchmarks, *skipped] if b.get("baseline")}
    return [v for v in verdicts if v.target in gated and v.artifact not in baselines]


def passed(verdicts, strict: bool) -> bool:
    # no-meter: a budget its profile judges only where a meter is (power.required: false);
    # a failed verdict (a missed budget, a variant that did not run) always fails
    ok = (PASS, NO_METER) if strict else (PASS, NO_METER, UNMEASURED, OFF_TARGET)
    return all(v.status in ok for v in verdicts)
