"""The recommendations as the first lines of report.md."""
from __future__ import annotations

from compress.report.mdtext import md


def recommendation_lines(report: dict) -> list[str]:
    recs = report.get("recommendations")
    if recs is None:
        return []
    lines = ["## What to ship", ""]
    # the sentence without its leading "target: ", which the bold name stands for
    lines += [f"- **{md(r['target'])}**: {md(r['summary'].split(': ', 1)[1])} "
              f"({md(r['why'])})" for r in recs]
    fronts = report.get("pareto") or {}
    if any(fronts.values()):
        lines += ["", "Pareto front per target (no other variant is faster, closer to the "
                  "original and smaller at once): " + "; ".join(
                      f"{md(t)}: {', '.join(map(md, ids))}" for t, ids in fronts.items() if ids)]
    return lines + [""] + _search_lines(report.get("search"))


def _search_lines(search: dict | None) -> list[str]:
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
