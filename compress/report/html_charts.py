"""The charts of report.html, one plotly figure each: per target, latency against the
metric with the budgets and the Pareto front drawn in; file size and peak memory against
their budgets; the layer sensitivity of accuracy-aware quantization.

Text handed to plotly is escaped here: plotly reads `<b>`-like tags in labels and hover
text, and artifact names, layer names and targets come from users.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from compress.report.html_parts import budgets_of, escape

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")
# An axis whose values (budget included) span more than this ratio is drawn on a log
# scale: a 0.03 MB model under a 50 MB budget would otherwise be a bar one pixel high.
LOG_RATIO = 20
_HEIGHT = 420
# the parts of plotly_white that bar and scatter charts use: the whole template (polar,
# geo and 3-D scenes, colour scales, 7 kB) would be written into every figure's data
_CARTESIAN = ("autotypenumbers", "colorway", "font", "hovermode", "hoverlabel",
              "paper_bgcolor", "plot_bgcolor", "xaxis", "yaxis", "shapedefaults",
              "annotationdefaults", "title")


@dataclass(frozen=True)
class Chart:
    """One figure of the page: its heading, the plotly figure and a plain-text note."""
    title: str
    figure: object
    note: str = ""


def recommended(report: dict, target: str) -> str | None:
    """The artifact recommended for `target`, if the report has one."""
    return next((r.get("artifact") for r in report.get("recommendations") or []
                 if r.get("target") == target and r.get("artifact")), None)


def _log_scale(values: list[float]) -> bool:
    positive = [v for v in values if v is not None and v > 0]
    return len(positive) > 1 and max(positive) / min(positive) > LOG_RATIO


@lru_cache(maxsize=1)
def _template() -> dict:
    import plotly.io as pio
    full = pio.templates["plotly_white"].to_plotly_json()
    return {"layout": {k: v for k, v in full["layout"].items() if k in _CARTESIAN},
            "data": {k: v for k, v in full["data"].items() if k in ("bar", "scatter")}}


def _style(fig, x_title: str, y_title: str, **layout) -> None:
    fig.layout.template = _template()   # set, not updated: an update merges into plotly's
    fig.update_layout(height=_HEIGHT, xaxis_title=x_title, yaxis_title=y_title,
                      margin={"l": 70, "r": 30, "t": 40, "b": 70},
                      legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
                      **layout)


def _log_range(values: list[float]) -> list[float]:
    """A log axis's range (in log10 units, as plotly takes it) with room above the top
    budget line for its label."""
    positive = [v for v in values if v is not None and v > 0]
    return [math.log10(min(positive) / 3), math.log10(max(positive) * 2.5)]


def _budget_line(fig, axis: str, value: float, text: str, colour: str) -> None:
    # horizontal text, left of a vertical line's foot: the top right corner is where
    # the horizontal budget line's label goes
    label = ({"textposition": "start", "textangle": 0, "xanchor": "right"} if axis == "x"
             else {"textposition": "end"})
    add = fig.add_vline if axis == "x" else fig.add_hline
    add(value, line={"dash": "dash", "color": colour, "width": 1.5},
        label={"text": escape(text), "font": {"color": colour}, **label})


def _y_kind(benches: list[dict]) -> tuple[str, str]:
    """What the scatter's y axis shows: the metric's drop, else its value, else size."""
    metrics = [b["metric"] for b in benches if b.get("metric")]
    if any(m.get("drop") is not None for m in metrics):
        return "drop", f"{metrics[0]['name']} drop vs the source"
    if metrics:
        return "value", metrics[0]["name"]
    return "size", "model file size (MB)"


def _y_of(bench: dict, kind: str) -> float | None:
    if kind == "size":
        return bench["size_bytes"] / 2**20
    return (bench.get("metric") or {}).get(kind)


def _hover(bench: dict, kind: str, label: str, y: float) -> str:
    lines = [escape(bench["artifact"]) + (" (baseline)" if bench["baseline"] else ""),
             f"engine {escape(str(bench.get('engine')))}",
             f"p90 {bench['latency_ms']['p90']:.4g} ms",
             f"size {bench['size_bytes'] / 2**20:.4g} MB"]
    if kind != "size":
        lines.append(f"{escape(label)} {y:.4g}")
    return "<br>".join(lines)


def _points_trace(go, points: list[tuple], name: str, marker: dict):
    return go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="markers",
                      name=name, marker=marker, hovertext=[p[3] for p in points],
                      hoverinfo="text")


def _mark_choices(go, fig, report: dict, target: str, points: dict) -> None:
    """The Pareto front's points ringed, and the recommended variant starred. The front
    is over p90, drop and size: a line through it in this plane would zigzag."""
    front = sorted(points[a] for a in (report.get("pareto") or {}).get(target, []) if a in points)
    if front:
        fig.add_trace(go.Scatter(x=[p[0] for p in front], y=[p[1] for p in front],
                                 mode="markers", name="Pareto front (p90, drop, size)",
                                 hoverinfo="skip", marker={"symbol": "circle-open", "size": 19,
                                                           "color": PALETTE[1], "line": {"width": 2}}))
    best = recommended(report, target)
    if best in points:
        # drawn over its point, whose hover text it would only repeat
        fig.add_trace(go.Scatter(x=[points[best][0]], y=[points[best][1]], mode="markers",
                                 name="recommended", hoverinfo="skip", marker={
                                     "symbol": "star", "size": 22, "color": "#f2b701",
                                     "line": {"width": 1, "color": "#333"}}))


def target_scatter(go, report: dict, target: str, budgets: dict) -> Chart:
    """Latency p90 against the metric's drop (or value, or size) for one target."""
    benches = [b for b in report["benchmarks"] if b["target"] == target]
    kind, label = _y_kind(benches)
    points = {}
    for bench in benches:
        y = _y_of(bench, kind)
        if y is not None:
            points[bench["artifact"]] = (bench["latency_ms"]["p90"], y, bench["baseline"],
                                         _hover(bench, kind, label, y))
    fig = go.Figure()
    for baseline, name, symbol, colour in ((False, "variant", "circle", PALETTE[0]),
                                           (True, "baseline (the model as given)", "diamond",
                                            PALETTE[7])):
        chosen = [p for p in points.values() if p[2] is baseline]
        if chosen:
            fig.add_trace(_points_trace(go, chosen, name, {"symbol": symbol, "size": 11,
                                                           "color": colour}))
    _mark_choices(go, fig, report, target, points)
    limits = budgets.get(target, {})
    xs = [p[0] for p in points.values()]
    if limits.get("latency_p90_ms") is not None:
        _budget_line(fig, "x", limits["latency_p90_ms"],
                     f"p90 budget {limits['latency_p90_ms']:g} ms", PALETTE[3])
        xs.append(limits["latency_p90_ms"])
    key, unit = {"drop": ("accuracy_drop", ""), "size": ("model_size_mb", " MB")}.get(kind, (None, ""))
    if key and limits.get(key) is not None:
        _budget_line(fig, "y", limits[key], f"{key} budget {limits[key]:g}{unit}", PALETTE[3])
    _style(fig, "latency p90 (ms)", label)
    if _log_scale(xs):
        fig.update_xaxes(type="log", range=_log_range(xs), dtick=1,
                         title_text="latency p90 (ms), log scale")
    missing = [b["artifact"] for b in benches if b["artifact"] not in points]
    note = f"Not drawn (no {label} measured): {', '.join(missing)}." if missing else ""
    return Chart(f"{target}: latency p90 against {label}", fig, note)


def _bar_scale(fig, values: list[float]) -> None:
    if _log_scale(values):
        fig.update_yaxes(type="log", range=_log_range(values), dtick=1,
                         title_text=fig.layout.yaxis.title.text + ", log scale")


def size_chart(go, report: dict, budgets: dict) -> Chart | None:
    """The file size of every benchmarked variant, with each target's size budget."""
    sizes: dict[str, tuple[float, bool]] = {}
    for bench in report["benchmarks"]:
        sizes.setdefault(bench["artifact"], (bench["size_bytes"] / 2**20, bench["baseline"]))
    if not sizes:
        return None
    fig = go.Figure()
    for baseline, name, colour in ((False, "variant", PALETTE[0]),
                                   (True, "baseline (the model as given)", PALETTE[7])):
        ids = [a for a, (_, base) in sizes.items() if base is baseline]
        if ids:
            fig.add_trace(go.Bar(x=[escape(a) for a in ids], y=[sizes[a][0] for a in ids],
                                 name=name, marker_color=colour, hoverinfo="text",
                                 texttemplate="%{y:.3g}", textposition="outside",
                                 hovertext=[f"{escape(a)}<br>{sizes[a][0]:.4g} MB" for a in ids]))
    values = [s for s, _ in sizes.values()]
    for i, target in enumerate(budgets):
        limit = budgets[target].get("model_size_mb")
        if limit is not None:
            _budget_line(fig, "y", limit, f"{target}: {limit:g} MB", PALETTE[(i + 2) % len(PALETTE)])
            values.append(limit)
    _style(fig, "variant", "model file size (MB)", barmode="relative",
           xaxis={"categoryorder": "array", "categoryarray": [escape(a) for a in sizes]})
    _bar_scale(fig, values)
    return Chart("Model file size", fig)


def _memory_hover(bench: dict) -> str:
    model = bench.get("model_memory_mb")
    return (f"{escape(bench['artifact'])} on {escape(bench['target'])}<br>peak "
            f"{bench['peak_memory_mb']:.1f} MB"
            + (f" (the model's share {model:.1f} MB)" if model is not None else ""))


def memory_chart(go, report: dict, budgets: dict) -> Chart | None:
    """Peak memory of every variant on every target, with the targets' memory budgets."""
    targets = list(dict.fromkeys(b["target"] for b in report["benchmarks"]))
    artifacts = [escape(a) for a in dict.fromkeys(b["artifact"] for b in report["benchmarks"])]
    if not targets:
        return None
    fig, values = go.Figure(), []
    for i, target in enumerate(targets):
        rows = [b for b in report["benchmarks"]
                if b["target"] == target and b.get("peak_memory_mb") is not None]
        colour = PALETTE[(i + 2) % len(PALETTE)]
        values += [b["peak_memory_mb"] for b in rows]
        fig.add_trace(go.Bar(
            x=[escape(b["artifact"]) for b in rows], y=[b["peak_memory_mb"] for b in rows],
            name=escape(target), marker_color=colour, hoverinfo="text",
            texttemplate="%{y:.3g}", textposition="outside",
            hovertext=[_memory_hover(b) for b in rows]))
        limit = budgets.get(target, {}).get("peak_memory_mb")
        if limit is not None:
            _budget_line(fig, "y", limit, f"{target}: {limit:g} MB", colour)
            values.append(limit)
    _style(fig, "variant", "peak memory of the benchmark process (MB)", barmode="group",
           xaxis={"categoryorder": "array", "categoryarray": artifacts})
    _bar_scale(fig, values)
    return Chart("Peak memory per target", fig)


def sensitivity_charts(go, report: dict) -> list[Chart]:
    """Per accuracy-aware artifact: how much of the metric each layer recovered when it
    alone stayed in float."""
    found = []
    for artifact in report["artifacts"]:
        search = (artifact.get("meta") or {}).get("accuracy_aware") or {}
        rows = sorted(search.get("sensitivity") or [], key=lambda r: -r["recovered"])
        if not rows:
            continue
        fig = go.Figure(go.Bar(
            x=[escape(r["layer"]) for r in rows], y=[r["recovered"] for r in rows],
            marker_color=PALETTE[4], hoverinfo="text",
            hovertext=[f"{escape(r['layer'])}<br>torch module {escape(r.get('module') or '—')}"
                       f"<br>metric with it in float {r['metric_without_it']:.6f}"
                       f"<br>recovered {r['recovered']:+.6f}" for r in rows]))
        _style(fig, "layer kept in float", "metric recovered")
        found.append(Chart(f"{artifact['id']}: metric recovered by keeping each layer in "
                           "float", fig))
    return found


def chart_sections(go, report: dict) -> list[tuple[str, list[Chart]]]:
    """The page's chart sections in order, each with its charts (empty ones left out)."""
    budgets = budgets_of(report)
    targets = list(dict.fromkeys(b["target"] for b in report["benchmarks"]))
    sections = [
        ("Latency against accuracy, per target",
         [target_scatter(go, report, t, budgets) for t in targets]),
        ("Size and memory", [c for c in (size_chart(go, report, budgets),
                                         memory_chart(go, report, budgets)) if c]),
        ("Per-layer sensitivity (accuracy-aware quantization)", sensitivity_charts(go, report)),
    ]
    return [(title, charts) for title, charts in sections if charts]
