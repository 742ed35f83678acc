"""A run's verdicts, and what decides its exit code: something to ship on every gated
target (compress.report.decide's recommendations)."""
from __future__ import annotations

from compress.report.decide import UNJUDGED
from compress.report.words import answered
from profiles import check, unmeasured_language_verdicts, unmeasured_verdicts
from profiles.check import did_not_run_verdicts
from runtimes import formats


def verdicts_of(benchmarks: list[dict], skipped: list[dict], artifacts, targets) -> list:
    """Every measured pair's verdicts, those of the pairs left unmeasured (with what is
    known of them: the file's size, a metric measured on another target), and those of
    the pairs whose runner was killed there (`died`: every budget failed, with why)."""
    profiles = dict(targets)
    verdicts = []
    for bench in benchmarks:
        verdicts.extend(check(bench, profiles[bench["target"]], bench["artifact"], bench["target"]))
    sizes = {a.id: a.size_bytes for a in artifacts}
    language = {a.id for a in artifacts if formats.is_language(a.format)}  # judged by language_model
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


def target_answers(recommendations: list[dict], gated, strict: bool) -> dict[str, bool]:
    """Per gated target, whether it has something to ship: a variant meeting every budget
    on the device (ship), or, unless `strict`, one meeting them off the device or with a
    budget left unmeasured (candidate). A variant that missed a budget is information: it
    decides nothing while another one ships. A target with no verdict at all (a pipeline
    without a benchmark stage judges nothing) is left out: nothing was asked of it."""
    return {r["target"]: answered(r, strict) for r in recommendations
            if r["target"] in gated and r["status"] != UNJUDGED}


def passed(recommendations: list[dict], gated, strict: bool) -> bool:
    """The run passes when every gated target has something to ship (target_answers)."""
    return all(target_answers(recommendations, gated, strict).values())
