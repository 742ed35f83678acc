"""What `compress run` prints when it ends, from report.json's content: the variants that
missed a budget (and by how much) or did not run, the pairs left unmeasured grouped by
why, each budget without a number said once, one line per target (compress.report.words)
and the verdict. Everything else is in report.md; a line here never repeats a fact that
holds for every row. Pure: lines out, the CLI prints them."""
from __future__ import annotations

from compress.report.decide import CANDIDATE, miss_side
from compress.report.words import answered, status_of, target_line
from profiles import FAIL, NO_METER, UNITS, UNMEASURED
from profiles.check import DID_NOT_RUN


def _missed(report: dict) -> list[str]:
    """One line per variant and target that missed budgets: which, by how much."""
    missed: dict[tuple, list[str]] = {}
    for v in report["verdicts"]:
        if v["status"] != FAIL:
            continue
        if v["value"] is None:   # its runner did not run there: the why is the reason
            text = v["reason"]
        else:
            unit = f" {UNITS[v['metric']]}" if UNITS.get(v["metric"]) else ""
            text = (f"{v['metric']} {v['value']:.3g}{unit} "
                    f"({miss_side({'budget': v['metric']})} {v['budget']:g}{unit})")
        missed.setdefault((v["target"], v["artifact"]), [])
        if text not in missed[(v["target"], v["artifact"])]:
            missed[(v["target"], v["artifact"])].append(text)
    baselines = {b["artifact"] for b in report.get("benchmarks", ()) if b.get("baseline")}
    # a runner killed there: its reason ("did not run: ...") says it, for every budget
    return [f"{target}: {artifact}{' (baseline)' * (artifact in baselines)} "
            + ("; ".join(texts) if texts[0].startswith(DID_NOT_RUN) else
               f"misses {'; '.join(texts)}") for (target, artifact), texts in missed.items()]


def _grouped(pairs: list[tuple[str, str, str]]) -> list[str]:
    """(target, what, why) rows as one line per (target, why)."""
    groups: dict[tuple, list[str]] = {}
    for target, what, why in pairs:
        groups.setdefault((target, why), []).append(what)
    return [f"{target}: {', '.join(dict.fromkeys(whats))} not measured: {why}"
            for (target, why), whats in groups.items()]


def _unmeasured_budgets(report: dict) -> list[str]:
    """Each reason a budget has no number, once, over every budget and target it holds
    for: its short words (report.md says more)."""
    groups: dict[str, tuple[list, list]] = {}
    for v in report["verdicts"]:
        if v["status"] in (NO_METER, UNMEASURED) and v["value"] is None:
            budgets, targets = groups.setdefault(v["reason"].split(";", 1)[0], ([], []))
            budgets.append(v["metric"])
            targets.append(v["target"])
    return [f"{', '.join(dict.fromkeys(budgets))} not judged on "
            f"{', '.join(dict.fromkeys(targets))}: {why} (report.md says more)"
            for why, (budgets, targets) in groups.items()]


def _verdict(report: dict, passed: bool) -> str:
    gated = set(report.get("gated_targets") or ())
    recs = [r for r in report.get("recommendations", ()) if r["target"] in gated]
    if passed:
        candidates = [r["target"] for r in recs if r["status"] == CANDIDATE]
        also = (f" ({', '.join(candidates)}: a candidate only, check it on the device)"
                if candidates else "")
        return f"PASSED: something to ship on every gated target{also}"
    short = [f"{r['target']} ({status_of(r)})" for r in recs
             if not answered(r, report.get("strict", False))]
    strict = " (--strict: a candidate does not count)" if report.get("strict") else ""
    return f"FAILED: nothing to ship on {', '.join(short)}{strict}"


def closing_lines(report: dict, passed: bool, report_path: str) -> list[str]:
    """The lines a run ends with (see the module's docstring)."""
    not_measured = [(f["target"], f["artifact"], f["fits"].removeprefix("not measured: "))
                    for f in report.get("fits", ()) if f["fits"].startswith("not measured: ")]
    return [*_missed(report), *_grouped(not_measured), *_unmeasured_budgets(report),
            *(target_line(r) for r in report.get("recommendations", ())),
            f"{_verdict(report, passed)}; report: {report_path}"]
