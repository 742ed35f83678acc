"""The first screen of report.md: what the heading's PASSED or FAILED means, one row per
target saying what to ship, each file's path and how to feed it (once per file), and
the terms the report uses."""
from __future__ import annotations

from compress.report import decide
from compress.report.mdtext import md
from compress.report.words import NONE, answered, status_of, terms_used

# the terms every report explains: the heading's sentence and the table use them
ALWAYS = ("gated", "shippable", "candidate")


def _caveat(rec: dict) -> str:
    """Why a candidate is not shippable, in a few words."""
    if rec.get("off_target_reason"):
        return "measured off the device"
    if rec.get("unmeasured"):
        return f"{md(', '.join(rec['unmeasured']))} unmeasured"
    return "not every budget settled"


def _failure(rec: dict) -> str:
    target = md(rec["target"])
    if rec["status"] == decide.CANDIDATE:
        return f"{target} has only a candidate ({_caveat(rec)}), which --strict does not count"
    if rec["status"] == decide.NOTHING_FITS:
        return f"{target} has no variant meeting every budget"
    return f"{target}: {md(rec['why'])}"


def verdict_sentence(report: dict) -> list[str]:
    """The sentence under the heading: what PASSED or FAILED amounts to, per gated target."""
    recs = report.get("recommendations")
    if recs is None:
        return []
    gated = [r for r in recs if r["target"] in report["gated_targets"]
             and r["status"] != decide.UNJUDGED]
    if not gated:
        return ["No target's budgets decide this run: none is gated, or none was judged.", ""]
    failing = [r for r in gated if not answered(r, report["strict"])]
    if failing:
        return ["; ".join(map(_failure, failing)) + ".", ""]
    candidates = "; ".join(f"{md(r['target'])}: a candidate, {_caveat(r)}"
                           for r in gated if r["status"] == decide.CANDIDATE)
    return ["Every gated target has a variant to ship" +
            (f" ({candidates})." if candidates else "."), ""]


def _paths(report: dict) -> dict:
    """Each artifact's file as the run folder (where report.md is) holds it."""
    return {a["id"]: a["path"] for a in report.get("artifacts") or () if a.get("path")}


def _speed(rec: dict) -> str:
    if rec.get("language_model"):
        return f"{rec['language_model']['decode_tok_s']:.3g}"
    return "—" if rec["latency_p90_ms"] is None else f"{rec['latency_p90_ms']:.3g}"


def _measured(rec: dict) -> str:
    where = ("on the device" if rec["measured_on_device"] else
             "off the device: " + md(rec["off_target_reason"].removeprefix("measured ")))
    unmeasured = ", ".join(rec.get("unmeasured") or [])
    return where + (f"; {md(unmeasured)} unmeasured" if unmeasured else "")


def _row(rec: dict) -> str:
    target, shown = md(rec["target"]), status_of(rec)
    if rec["artifact"] is None:   # nothing to ship: the closest miss and by how much
        miss = rec.get("closest_miss")
        why = rec["why"] + (f"; closest: {miss['artifact']} ({decide._misses(miss)})"
                            if miss else "")
        return f"| {target} | {shown} | — | — | — | — | — | {md(why)} |"
    drop = ("—" if rec["drop"] is None else f"{rec['drop']:+.2%}" if rec.get("language_model")
            else f"{rec['drop']:.4g}")
    file = (f"{md(rec['artifact'])} ({md(rec['format'])} {md(rec['precision'])}"
            f"{', on ' + md(rec['engine']) if rec.get('engine') else ''})")
    return (f"| {target} | {shown} | {file} | {_speed(rec)} | {rec['model_size_mb']:.3g} | "
            f"{drop} | {_measured(rec)} | {md(rec['why'])} |")


def _file_lines(recs: list[dict], paths: dict) -> list[str]:
    """Each file recommended, once: where it is and how to feed it."""
    files: dict[str, list[dict]] = {}
    for rec in recs:
        if rec["artifact"] is not None and status_of(rec) != NONE:
            files.setdefault(rec["artifact"], []).append(rec)
    lines = []
    for artifact, mine in files.items():
        feeding = decide._feeding_text(mine[0].get("feeding"))
        lines.append(f"- {md(paths.get(artifact) or mine[0]['path'] or artifact)} "
                     f"({', '.join(md(r['target']) for r in mine)})"
                     + (f": {md(feeding)}" if feeding else ""))
    return ["", "Files (paths from this report's folder) and how to feed them:", "", *lines] \
        if lines else []


def recommendation_lines(report: dict) -> list[str]:
    recs = report.get("recommendations")
    if recs is None:
        return []
    lm = any(r.get("language_model") for r in recs)
    lines = ["## What to ship", "",
             f"| target | answer | file | {'decode tok/s' if lm else 'p90 ms'} | size MB | "
             f"{'perplexity' if lm else 'drop'} | measured | why |",
             "|---|---|---|---:|---:|---:|---|---|", *map(_row, recs),
             *_file_lines(recs, _paths(report))]
    fronts = report.get("pareto") or {}
    if any(fronts.values()):
        lines += ["", "Pareto front per target (no other variant is faster, closer to the "
                  "original and smaller at once): " + "; ".join(
                      f"{md(t)}: {', '.join(map(md, ids))}" for t, ids in fronts.items() if ids)]
    return lines + [""]


def glossary_lines(text: str) -> list[str]:
    """The terms `text` (the rest of the report) uses, one line each."""
    return ["Terms:", "", *(f"- {term}: {meaning}" for term, meaning in terms_used(text, ALWAYS)),
            ""]


def search_lines(search: dict | None) -> list[str]:
    """The trials of a search: what each tried and what came of it."""
    if not search:
        return []
    resumed = f", {search['resumed']} finished in an earlier session" if search["resumed"] else ""
    lines = [f"## Search: {len(search['trials'])} trials ({search['strategy']}{resumed})", "",
             "| trial | choices | state | variants | seconds |", "|---|---|---|---|---:|"]
    for t in search["trials"]:
        state = t["state"] + (f" (same as {t['same_as']})" if t.get("same_as") else "")
        state += f": {t['error']}" if t.get("error") and t["state"] != "duplicate" else ""
        choices = ", ".join(f"{k}={v}" for k, v in t["params"].items())
        lines.append(f"| {md(t['id'])} | {md(choices)} | {md(state)} | "
                     f"{md(', '.join(t.get('artifacts') or [])) or '—'} | "
                     f"{t.get('seconds') or 0:.1f} |")
    return lines + [""]
