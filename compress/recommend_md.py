"""The recommendations as the first lines of report.md."""
from __future__ import annotations

from compress.mdtext import md


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
    return lines + [""]
