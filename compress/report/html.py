"""report.html: the report as one self-contained page with charts (plotly's JavaScript
inlined once), readable offline on a machine that cannot reach the internet.

Every string from the report is escaped: artifact names, reasons and errors come from
users and from the tools the pipeline ran.
"""
from __future__ import annotations

import itertools

from compress.report import decide
from compress.report.html_parts import (Html as _Html, escape, script_text, table as _table,
                                        text as _text)
from compress.report.html_quality import quality_section
from compress.core.lazy import require
from compress.report.notes import hottest, how_measured, machine_text
from runtimes.safe_text import safe_text

_PURPOSE = "the HTML report (report.html)"
_CHART_CONFIG = {"displaylogo": False, "responsive": True}
_STATUS_CLASS = {decide.SHIP: "good", decide.CANDIDATE: "maybe", decide.NOTHING_FITS: "bad",
                 decide.UNMEASURED: "none"}
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
"""


def _header(report: dict) -> str:
    passed = report.get("passed")
    word, css = ("PASSED", "good") if passed else ("FAILED", "bad")
    gated = ", ".join(report.get("gated_targets") or []) or "none"
    strict = " (strict: unmeasured and off-target count as failures)" if report.get("strict") else ""
    sha = (report.get("pipeline") or {}).get("config_sha256", "")
    name = (report.get("pipeline") or {}).get("name", "pipeline")
    return (f'<h1>{escape(name)}: <span class="{css}">{word}</span></h1>'
            f"<p>Gated targets: {escape(gated)}{strict}. Config sha256 <code>{escape(sha)}</code>. "
            "Every number here is in report.json beside this page; report.md has the tables.</p>")


def _feeding(feeding: dict | None) -> str:
    if not feeding:
        return "—"
    shape = "x".join(str(d) for d in feeding.get("shape") or [])
    parts = [feeding.get("name"), feeding.get("layout"), feeding.get("dtype"), shape or None]
    text = " ".join(str(p) for p in parts if p)
    if feeding.get("scale") is not None:
        text += f", input scale {feeding['scale']:.6g} zero point {feeding.get('zero_point')}"
    return text


def _closest_miss(miss: dict | None) -> str:
    if not miss:
        return "—"
    return f"{miss['artifact']}: " + "; ".join(_one_miss(m) for m in miss["misses"])


def _one_miss(m: dict) -> str:
    if m["value"] is None:   # no number: the variant did not run (its runner was killed)
        return f"{m['budget']}: {m.get('reason') or 'not measured'}"
    return (f"{m['budget']} {_text(m['value'])} {decide.miss_side(m)} the limit {m['limit']:g} "
            f"by {_text(m['over_by'])}"
            + (f" ({m['over_by_ratio']:+.1%})" if m["over_by_ratio"] is not None else ""))


def _recommendation_card(rec: dict) -> str:
    status = rec.get("status") or "unmeasured"
    css = _STATUS_CLASS.get(status, "none")
    variant = ", ".join(str(rec[k]) for k in ("engine", "format", "precision") if rec.get(k))
    items = [("variant", f"{rec.get('artifact') or '—'}" + (f" ({variant})" if variant else "")),
             ("path", rec.get("path") or "—"), ("why", rec.get("why") or "—"),
             ("p90", f"{_text(rec.get('latency_p90_ms'))} ms"),
             ("peak memory", f"{_text(rec.get('peak_memory_mb'))} MB"),
             ("size", f"{_text(rec.get('model_size_mb'))} MB"),
             ("metric", _metric_text(rec)), ("feeding", _feeding(rec.get("feeding")))]
    if rec.get("off_target_reason"):
        items.append(("measured", f"off the device: {rec['off_target_reason']}"))
    if rec.get("unmeasured"):
        items.append(("unmeasured", ", ".join(rec["unmeasured"])))
    if status == "nothing fits" or rec.get("closest_miss"):
        items.append(("closest miss", _closest_miss(rec.get("closest_miss"))))
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in items)
    return (f'<div class="card"><h3>{escape(rec.get("target", "?"))} '
            f'<span class="badge {css}">{escape(status)}</span></h3>'
            f"<p>{escape(rec.get('summary') or '')}</p><dl>{rows}</dl></div>")


def _metric_text(rec: dict) -> str:
    metric = rec.get("metric")
    if not metric:
        return "—"
    drop = f", drop {_text(rec['drop'])}" if rec.get("drop") is not None else ""
    return f"{metric['name']} {_text(metric['value'])}{drop}"


def _recommendations(report: dict) -> str:
    recs = report.get("recommendations")
    if recs is None:
        return "<h2>Recommendations</h2><p>No recommendation in this report.</p>"
    cards = "".join(_recommendation_card(r) for r in recs) or "<p>No target to recommend for.</p>"
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


def _energy(bench: dict) -> _Html:
    power = bench.get("power")
    if bench.get("energy_mj") is not None:
        meter = f" (meter {power.get('meter')}: {power.get('detail')})" if power else ""
        return _Html(escape(f"{bench['energy_mj']:.4g} mJ{meter}"))
    note = bench.get("energy_note") or "no power meter"
    return _Html(f"<details><summary>unmeasured</summary>{escape(note)}</details>")


def _where_measured(report: dict) -> str:
    rows = [[b["target"], b["artifact"], b.get("engine"), machine_text(b.get("measured_on") or {}),
             how_measured(b.get("remote")),
             f"emulated ({b['emulated']}): not the device's timings" if b.get("emulated") else "no",
             _energy(b), b.get("load_ms"), b.get("first_run_ms")] for b in report["benchmarks"]]
    warnings = [escape(w) for w in report.get("cleanup_warnings") or []]
    return ("<h2>Where each number was measured</h2>" + _table(
        ["target", "artifact", "engine", "machine", "how", "emulated", "energy", "load ms",
         "first run ms"], rows) + "".join(f"<p>warning: {w}</p>" for w in warnings))


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


def render_html(report: dict) -> str:
    """The whole page; raises MissingDependency when plotly is not installed."""
    go = require("plotly.graph_objects", _PURPOSE)
    plotly_js = script_text(require("plotly.offline", _PURPOSE).get_plotlyjs())
    name = (report.get("pipeline") or {}).get("name", "pipeline")
    body = [_header(report), _recommendations(report), _charts(go, report),
            _placement(report), quality_section(report), _where_measured(report),
            _conditions(report), _search(report)]
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(name)}: compression report</title><style>{_CSS}</style>"
            f"<script>{plotly_js}</script></head>\n<body>\n"
            # every part escapes its fields (html_parts.escape); this pass covers what
            # plotly writes itself, the charts' data: its orjson engine, where installed,
            # leaves a C1 or bidi character raw in a JSON string
            + safe_text("\n".join(part for part in body if part)) + "\n</body></html>\n")
