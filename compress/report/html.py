"""report.html: the report as one self-contained page with charts (plotly's JavaScript
inlined once), readable offline on a machine that cannot reach the internet.

Every string from the report is escaped: artifact names, reasons and errors come from
users and from the tools the pipeline ran.
"""
from __future__ import annotations

import itertools
import re

from compress.core.lazy import require
from compress.report.html_parts import (escape, recommendation_card, script_text,
                                        table as _table)
from compress.report.html_quality import quality_section
from compress.report.notes import hottest, how_measured, machine_of, machine_text
from compress.report.words import STRICT_MEANS, terms_used
from profiles.check import meter_headline
from runtimes.safe_text import safe_text

_PURPOSE = "the HTML report (report.html)"
_CHART_CONFIG = {"displaylogo": False, "responsive": True}
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
  max-width:1240px;padding:16px 24px;color:#222;background:#fff}
h1 .good,h1 .bad{padding:2px 10px;border-radius:6px;color:#fff}
.good{background:#2e7d32}.maybe{background:#b26a00}.bad{background:#c62828}.none{background:#616161}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:12px}
.card{border:1px solid #ccc;border-radius:8px;padding:10px 14px}
.card h3{margin:4px 0 8px}.badge{color:#fff;border-radius:4px;padding:1px 8px;font-size:.85em}
.card dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 10px;margin:6px 0}
.card dt{color:#555}.card dd{margin:0;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:8px 0 16px;font-size:.9em}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:8px 0 20px}figcaption{color:#555;font-size:.9em}
code{overflow-wrap:anywhere}details summary{cursor:pointer}
.terms dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 10px;font-size:.9em}
.terms dt{font-weight:600}.terms dd{margin:0;color:#444}.footer{color:#555;font-size:.85em}
"""


def _header(report: dict) -> str:
    passed = report.get("passed")
    word, css = ("PASSED", "good") if passed else ("FAILED", "bad")
    gated = ", ".join(report.get("gated_targets") or []) or "none"
    strict = f" ({STRICT_MEANS})" if report.get("strict") else ""
    sha = (report.get("pipeline") or {}).get("config_sha256", "")
    name = (report.get("pipeline") or {}).get("name", "pipeline")
    return (f'<h1>{escape(name)}: <span class="{css}">{word}</span></h1>'
            f"<p>Gated targets: {escape(gated)}{strict}. Config sha256 <code>{escape(sha)}</code>. "
            "Every number here is in report.json beside this page; report.md has the tables.</p>")


def _recommendations(report: dict) -> str:
    recs = report.get("recommendations")
    if recs is None:
        return "<h2>Recommendations</h2><p>No recommendation in this report.</p>"
    cards = "".join(recommendation_card(r, report) for r in recs) or \
        "<p>No target to recommend for.</p>"
    return f'<h2>Recommendations</h2><div class="cards">{cards}</div>'


def _charts(go, report: dict) -> str:
    from compress.report.html_charts import chart_sections
    numbers, parts = itertools.count(), []
    for title, charts in chart_sections(go, report):
        parts.append(f"<h2>{escape(title)}</h2>")
        for chart in charts:
            div = chart.figure.to_html(full_html=False, include_plotlyjs=False,
                                       div_id=f"chart-{next(numbers)}", config=_CHART_CONFIG,
                                       default_height="420px")
            note = f"<figcaption>{escape(chart.note)}</figcaption>" if chart.note else ""
            parts.append(f"<figure><h3>{escape(chart.title)}</h3>{div}{note}</figure>")
    return "\n".join(parts)


def _placement(report: dict) -> str:
    """Where each op ran (the shape compress/report/md_tables.py's placement_table reads)."""
    rows = []
    for bench in report["benchmarks"]:
        placed = bench.get("placement")
        if not placed:
            continue
        if "error" in placed:
            rows.append([bench["target"], bench["artifact"], placed["error"], "—"])
            continue
        fallback, int8 = placed.get("fallback"), placed.get("int8_nodes") or {}
        on = "; ".join(f"{name}: {part['nodes']} nodes"
                       + (f" ({int8[name]} in int8)" if int8.get(name) else "")
                       + f", {part['flops_share']:.1%} of FLOPs"
                       for name, part in placed["by_provider"].items()
                       if not fallback or name not in ("CPUExecutionProvider", "builtin"))
        back = ("—" if not fallback else "none" if not fallback["nodes"] else
                f"{fallback['nodes']} nodes ({', '.join(sorted(fallback['op_types']))}), "
                f"{fallback['flops_share']:.1%} of FLOPs")
        rows.append([bench["target"], bench["artifact"], on, back])
    if not rows:
        return ""
    return ("<h2>Where each op ran</h2>" + _table(
        ["target", "artifact", "on the accelerator", "fell back to the CPU"], rows)
        + "<p>FLOPs are estimated from the tensor shapes.</p>")


def _energy(bench: dict) -> str:
    power = bench.get("power")
    if bench.get("energy_mj") is not None:
        meter = f" (meter {power.get('meter')}: {power.get('detail')})" if power else ""
        return f"{bench['energy_mj']:.4g} mJ{meter}"
    return meter_headline(bench.get("energy_note"))


def _meters(report: dict) -> str:
    """Why energy has no number, in full (every meter looked for and why it was not
    there), once per machine: each row above carries only its first words."""
    notes = {}
    for bench in report["benchmarks"]:
        note = bench.get("energy_note")
        if bench.get("energy_mj") is None and note and note != meter_headline(note):
            notes.setdefault((machine_of(bench), note), None)
    return "".join(f"<p>Energy on {escape(where)}: {escape(note)}</p>" for where, note in notes)


def _where_measured(report: dict) -> str:
    rows = [[b["target"], b["artifact"], b.get("engine"), machine_text(b.get("measured_on") or {}),
             how_measured(b.get("remote")),
             f"emulated ({b['emulated']}): not the device's timings" if b.get("emulated") else "no",
             _energy(b), b.get("load_ms"), b.get("first_run_ms")] for b in report["benchmarks"]]
    warnings = [escape(w) for w in report.get("cleanup_warnings") or []]
    return ("<h2>Where each number was measured</h2>" + _table(
        ["target", "artifact", "engine", "machine", "how", "emulated", "energy", "load ms",
         "first run ms"], rows) + _meters(report)
        + "".join(f"<p>warning: {w}</p>" for w in warnings))


def _conditions(report: dict) -> str:
    rows = []
    for bench in report["benchmarks"]:
        cond = bench.get("conditions") or {}
        before, after = cond.get("before") or {}, cond.get("after") or {}
        start, end = hottest(before), hottest(after)
        clocks = before.get("jetson_clocks")
        rows.append([bench["target"], bench["artifact"], "/".join(before.get("governors") or []) or None,
                     f"{start:.1f} -> {end:.1f}" if start is not None and end is not None else None,
                     (before.get("nvpmodel") or {}).get("mode"),
                     None if not clocks else ("on" if clocks.get("on") else "off") + " (inferred)",
                     ", ".join(map(str, cond.get("cpu_affinity") or [])) or None,
                     "; ".join(cond.get("warnings") or []) or None])
    if not any(any(cell is not None for cell in row[2:]) for row in rows):
        return ""
    return "<h2>Conditions during each measurement</h2>" + _table(
        ["target", "artifact", "CPU governor", "hottest zone °C (before -> after)", "nvpmodel",
         "jetson_clocks", "pinned to CPUs", "warnings"], rows)


def _search(report: dict) -> str:
    search = report.get("search")
    if not search:
        return ""
    space = "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in (search.get("space") or {}).items())
    rows = [[t.get("id"), ", ".join(f"{k}={v}" for k, v in (t.get("params") or {}).items()),
             t.get("state"), t.get("error"), t.get("seconds")] for t in search.get("trials") or []]
    resumed = search.get("resumed")
    return (f"<h2>Search: {escape(str(search.get('strategy')))}</h2>"
            f"<p>Space: {escape(space or '—')}."
            + (f" {escape(str(resumed))} trial(s) found finished from an earlier run." if resumed else "")
            + "</p>" + _table(["trial", "params", "state", "error", "seconds"], rows))


def _terms(body: str) -> str:
    """The glossary's terms that the page uses, each with its meaning."""
    used = terms_used(body)
    # backticks mark a config key in the glossary (report.md's code spans)
    rows = "".join(f"<dt>{escape(term)}</dt><dd>"
                   + re.sub(r"`([^`]*)`", r"<code>\1</code>", escape(meaning)) + "</dd>"
                   for term, meaning in used)
    return f'<div class="terms"><h2>Terms</h2><dl>{rows}</dl></div>' if rows else ""


def _footer(page_bytes: int, plotly_bytes: int, version: str) -> str:
    return (f'<p class="footer">report.html: {page_bytes / 1e6:.3g} MB, of which plotly.js v'
            f"{escape(version)} {plotly_bytes / 1e6:.3g} MB, inlined once so the page opens "
            "offline.</p>")


def render_html(report: dict) -> str:
    """The whole page; raises MissingDependency when plotly is not installed."""
    go = require("plotly.graph_objects", _PURPOSE)
    offline = require("plotly.offline", _PURPOSE)
    plotly_js = script_text(offline.get_plotlyjs())
    name = (report.get("pipeline") or {}).get("name", "pipeline")
    body = [_header(report), _recommendations(report), _charts(go, report),
            _placement(report), quality_section(report), _where_measured(report),
            _conditions(report), _search(report)]
    body.insert(1, _terms("\n".join(body)))
    page = ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(name)}: compression report</title><style>{_CSS}</style>"
            f"<script>{plotly_js}</script></head>\n<body>\n"
            # every part escapes its fields (html_parts.escape); this pass covers what
            # plotly writes itself, the charts' data: its orjson engine, where installed,
            # leaves a C1 or bidi character raw in a JSON string
            + safe_text("\n".join(part for part in body if part)) + "\n")
    end, js_bytes = "</body></html>\n", len(plotly_js.encode())
    # the footer counts itself: its length hardly changes with the number it shows
    guess = _footer(len(page.encode()), js_bytes, offline.get_plotlyjs_version())
    size = len(page.encode()) + len(guess.encode()) + len(end)
    return page + _footer(size, js_bytes, offline.get_plotlyjs_version()) + end
