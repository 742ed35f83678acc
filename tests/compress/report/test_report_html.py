"""report.html: written by a real quickstart run (two targets), loaded in headless
Chromium: no script error, every chart drawn, no network request, a non-blank page; each
thing said once (a card's fields, the no-meter note per machine, plotly.js)."""
from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import onnx
import pytest

from compress.quant.accuracy_aware import Budget, search
from compress.report import decide
from compress.report.build import write_reports
from compress.report.html import render_html
from compress.report.html_parts import script_text
from compress.report.words import GLOSSARY, status_of

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HOSTILE = "<img src=x onerror=alert(1)>|*_"
# what a machine without a power meter says (runtimes/power: every meter looked for)
NO_METER_NOTE = ("no power meter on this host (ina3221: /sys/bus/i2c/drivers/ina3221/*/hwmon/"
                 "hwmon*/in*_label does not exist on this host; tegrastats: the command "
                 "tegrastats is not on PATH; rapl: /sys/class/powercap/intel-rapl:* does not "
                 "exist on this host; nvml is used only when named)")
DETAILS = ("(ina3221:", "nvml is used only when named")

# Records what a page would show in the console (uncaught errors, rejected promises,
# console.error) and every resource it fetched, into elements --dump-dom prints.
RECORDER = """<script>
window.__problems = [];
window.addEventListener("error", function (e) { window.__problems.push("error: " + e.message); });
window.addEventListener("unhandledrejection", function (e) { window.__problems.push("rejection: " + e.reason); });
(function () { var original = console.error; console.error = function () {
  window.__problems.push("console.error: " + Array.prototype.join.call(arguments, " "));
  return original.apply(console, arguments); }; })();
window.addEventListener("load", function () { setTimeout(function () {
  [["__problems", window.__problems],
   ["__requests", performance.getEntriesByType("resource").map(function (r) { return r.name; })]
  ].forEach(function (pair) { var out = document.createElement("pre"); out.id = pair[0];
    out.textContent = pair[1].join("\\n"); document.body.appendChild(out); }); }, 500); });
</script>"""


@pytest.fixture(scope="module")
def run_dir(quickstart_run) -> Path:
    """The quickstart pipeline's run (ONNX int8, TFLite int8; host-cpu and rpi4), few runs."""
    return quickstart_run[2].run_dir


@pytest.fixture(scope="module")
def report(run_dir) -> dict:
    return json.loads((run_dir / "report.json").read_text())


def _pareto(benches: list[dict]) -> list[str]:
    point = {b["artifact"]: (b["latency_ms"]["p90"], b["metric"]["drop"], b["size_bytes"])
             for b in benches}
    return [a for a, p in point.items()
            if not any(all(x <= y for x, y in zip(q, p)) and q != p for q in point.values())]


def _recommendation(run_dir: Path, report: dict, target: str) -> dict:
    """What decide adds for `target`, from this run's records: its fastest variant."""
    variants = [b for b in report["benchmarks"] if b["target"] == target and not b["baseline"]]
    best = min(variants, key=lambda b: b["latency_ms"]["p90"])
    artifact = next(a for a in report["artifacts"] if a["id"] == best["artifact"])
    path = str(run_dir / artifact["path"])
    p90 = best["latency_ms"]["p90"]
    return {"target": target, "status": "candidate", "artifact": best["artifact"], "path": path,
            "engine": best["engine"], "format": best["format"], "precision": artifact["precision"],
            "why": f"the fastest p90 of {len(variants)} variants", "latency_p90_ms": p90,
            "peak_memory_mb": best["peak_memory_mb"], "model_size_mb": best["size_bytes"] / 2**20,
            "metric": {"name": best["metric"]["name"], "value": best["metric"]["value"]},
            "drop": best["metric"]["drop"], "measured_on_device": target == "host-cpu",
            "off_target_reason": None, "unmeasured": ["energy_mj"], "feeding": None,
            "closest_miss": None, "summary": f"{target}: candidate {path}: p90 {p90:.3g} ms"}


def _sensitivity(run_dir: Path, report: dict, work_dir: Path) -> dict:
    """An accuracy-aware search over the exported model's real Conv/Gemm layers, with a
    modelled quantizer (each quantized layer costs a known share of the metric)."""
    onnx_path = run_dir / next(a["path"] for a in report["artifacts"] if a["format"] == "onnx")
    layers = [n.name for n in onnx.load(str(onnx_path)).graph.node if n.op_type in ("Conv", "Gemm")]
    cost = {layer: 0.01 * (i + 1) for i, layer in enumerate(layers)}
    made = {}

    def quantize(excluded, path):
        path.write_text("model")
        made[path] = set(excluded)
        return {}

    def evaluate(path):
        return 0.98 - sum(c for layer, c in cost.items() if layer not in made[path])
    return search(quantize, evaluate, Budget(0.98, 0.005), layers, work_dir)[1]


@pytest.fixture(scope="module")
def decided(run_dir, report, tmp_path_factory) -> dict:
    """The run's report with what compress/report/decide.py and a search add, derived from its
    own records, and the quantized model renamed to a hostile name everywhere."""
    out = copy.deepcopy(report)
    targets = list(dict.fromkeys(b["target"] for b in out["benchmarks"]))
    out["recommendations"] = [_recommendation(run_dir, out, t) for t in targets]
    out["pareto"] = {t: _pareto([b for b in out["benchmarks"] if b["target"] == t]) for t in targets}
    quantized = next(a for a in out["artifacts"] if a["stage"] == "quantize")
    quantized["meta"]["accuracy_aware"] = _sensitivity(run_dir, out, tmp_path_factory.mktemp("s"))
    variants = [a["id"] for a in out["artifacts"] if a["stage"] in ("quantize", "export.tflite")]
    out["search"] = {"strategy": "exhaustive", "space": {"quantize.calibration": ["minmax", "entropy"]},
                     "resumed": 0, "trials": [
                         {"id": "t000", "params": {"quantize.calibration": "minmax"}, "state": "complete",
                          "error": None, "run_dir": ".", "artifacts": variants,
                          "seconds": sum(a["meta"].get("seconds", 0.0) for a in out["artifacts"])},
                         {"id": "t001", "params": {"quantize.calibration": "entropy"}, "state": "failed",
                          "error": f"stage 2 failed on {HOSTILE}", "run_dir": "trials/t001",
                          "artifacts": [], "seconds": None}]}
    text = json.dumps(out).replace(json.dumps(quantized["id"]), json.dumps(HOSTILE))
    return json.loads(text)


class _Page(HTMLParser):
    """What a page holds: its charts (and which were drawn), tags, URLs, recorded text."""

    def __init__(self, text: str):
        super().__init__()
        self.charts, self.drawn, self.tags, self.urls, self.recorded = [], set(), [], [], {}
        self._plot = self._pre = self._hidden = None
        self.visible = []   # the text a reader sees: none of a script, style or title
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        self.tags.append(tag)
        if tag in ("script", "style", "title"):
            self._hidden = tag
        self.urls += [v for k, v in attrs.items() if k in ("src", "href", "xlink:href") and v]
        if tag == "div" and "plotly-graph-div" in classes:
            self.charts.append(attrs["id"])
        if tag == "div" and "js-plotly-plot" in classes:
            self._plot = attrs["id"]
        if tag == "svg" and "main-svg" in classes and self._plot:
            self.drawn.add(self._plot)
        if tag == "pre" and attrs.get("id", "").startswith("__"):
            self._pre = attrs["id"]
            self.recorded[self._pre] = ""

    def handle_data(self, data):
        if self._pre:
            self.recorded[self._pre] += data
        if not self._hidden:
            self.visible.append(data)

    def handle_endtag(self, tag):
        if tag == "pre":
            self._pre = None
        if tag == self._hidden:
            self._hidden = None

    @property
    def text(self) -> str:
        return "\n".join(self.visible)   # one text node a line: "PASSED" and "Gated" apart


def _expected_charts(report: dict) -> int:
    targets = {b["target"] for b in report["benchmarks"]}
    layered = [a for a in report["artifacts"]
               if ((a["meta"].get("accuracy_aware") or {}).get("sensitivity"))]
    return len(targets) + 2 + len(layered)   # a scatter per target, size, memory, layers


def _card(page: str, target: str) -> str:
    """The markup of `target`'s recommendation card."""
    start = page.index(f'<div class="card"><h3>{escape(target)}: ')
    return page[start:page.index("</div>", start)]


def test_the_run_writes_the_page_with_plotly_inlined_once(run_dir, report):
    from plotly.offline import get_plotlyjs, get_plotlyjs_version
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert page == render_html(report)
    plotly_js = script_text(get_plotlyjs())
    assert page.count(plotly_js) == 1 and "<script src" not in page
    for at in (0, len(plotly_js) // 2, len(plotly_js) - 300):   # no figure brings it again
        assert page.count(plotly_js[at:at + 300]) == 1
    # a figure holds its data and the look it uses, not plotly's whole template (7 kB)
    figures = re.findall(r"<figure>.*?</figure>", page, flags=re.S)
    assert figures and max(map(len, figures)) < 6000, list(map(len, figures))
    said = re.search(r"report\.html: ([\d.]+) MB, of which plotly\.js v(\S+) ([\d.]+) MB, "
                     r"inlined once so the page opens offline", _Page(page).text)
    assert said, "the footer says the page's size and plotly.js's"
    assert said[1] == f"{len(page.encode()) / 1e6:.3g}" and said[2] == get_plotlyjs_version()
    assert said[3] == f"{len(plotly_js.encode()) / 1e6:.3g}"
    assert not list(run_dir.glob(".report*.tmp"))
    assert len(_Page(page).charts) == _expected_charts(report)
    if "recommendations" not in report:
        assert "No recommendation in this report." in page
    for rec in report.get("recommendations", []):
        card = _card(page, rec["target"])
        assert f">{status_of(rec)}</span></h3>" in card
        # the fields once, no sentence repeating them; the file by its place in the run
        assert escape(rec["summary"]) not in page
        assert card.count(f"{rec['latency_p90_ms']:.3g} ms") == 1
        if rec["path"]:
            inside = next(a["path"] for a in report["artifacts"] if a["id"] == rec["artifact"])
            assert rec["path"] not in page and f"<dd>{escape(inside)} (" in card


def test_the_no_meter_note_is_said_once(run_dir, report):
    """The run's own page: what was looked for (no meter found) at most once, each row
    and card with the short line; once per machine where energy has no number."""
    page = _Page((run_dir / "report.html").read_text(encoding="utf-8")).text
    for detail in DETAILS:
        assert page.count(detail) <= 1, detail
    notes = {b["energy_note"] for b in report["benchmarks"]
             if b["energy_mj"] is None and " (" in (b["energy_note"] or "")}
    for note in notes:
        assert page.count(note) == 1


def test_the_no_meter_note_is_said_once_per_machine(decided):
    """Two machines without a meter, one reached over SSH (each benchmark's connection
    timed apart): the note in full once for each, every row and card with "no power
    meter" and the budget's name."""
    report = copy.deepcopy(decided)
    for i, bench in enumerate(report["benchmarks"]):
        bench.update(energy_mj=None, power=None, energy_note=NO_METER_NOTE)
        bench["measured_on"] = {**bench["measured_on"], "hostname": f"board{i % 2}"}
        bench["remote"] = None if i % 2 == 0 else {
            "host": "pi@board1", "connect_s": 0.1 * i, "copied_bytes": 2**20, "copy_s": 0.2,
            "run_s_median": 0.3 + i, "runs": 3, "cleanup_s": 0.01}
    page = _Page(render_html(report))
    assert page.text.count(NO_METER_NOTE) == 2
    for detail in DETAILS:
        assert page.text.count(detail) == 2, detail
    shown = len(report["benchmarks"]) + len(report["recommendations"])   # rows and cards
    assert page.text.count("no power meter on this host") == 2 + shown
    markup = render_html(report)
    for rec in report["recommendations"]:
        assert "energy_mj: no power meter on this host" in _card(markup, rec["target"])


def test_the_terms_come_before_the_answers(run_dir):
    """The glossary's terms the page uses, above the recommendations; none it does not."""
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    terms, answers = page.index("<h2>Terms</h2>"), page.index("<h2>Recommendations</h2>")
    rest = _Page(page[answers:]).text + _Page(page[:terms]).text   # the page but its terms
    shown = [term for term, _ in GLOSSARY if f"<dt>{escape(term)}</dt>" in page[terms:answers]]
    assert {"gated", "shippable", "candidate"} <= set(shown)   # the heading's, the cards'
    for term in shown:
        assert re.search(rf"(?<![\w-]){re.escape(term)}(?![\w-])", rest, re.IGNORECASE), term


def test_the_page_names_no_url(run_dir):
    page = _Page((run_dir / "report.html").read_text(encoding="utf-8"))
    assert page.urls == [] and "link" not in page.tags


def test_recommendations_pareto_and_search_render(decided, run_dir):
    page = render_html(decided)
    for rec in decided["recommendations"]:
        card = _card(page, rec["target"])
        inside = Path(rec["path"]).relative_to(run_dir).as_posix()
        assert escape(rec["path"]) not in page and f"<dd>{escape(inside)} (" in card
        assert f">{status_of(rec)}</span></h3>" in card and escape(rec["summary"]) not in page
        for field in ("p90", "size", "peak memory", "engine", "measured", "why"):
            assert card.count(f"<dt>{field}</dt>") == 1, field
        assert escape(rec["why"]) in card
    assert page.count('<div class="card">') == len(decided["recommendations"])
    assert "No recommendation" not in page
    # one front and one star per target (plotly's JSON escapes "<", ">" and "/")
    assert page.count('"name":"Pareto front (p90, drop, size)"') == len(decided["pareto"])
    assert page.count('"name":"recommended"') == len(decided["pareto"])
    assert len(_Page(page).charts) == _expected_charts(decided)
    assert "t001" in page and escape("quantize.calibration=entropy") in page


def test_nothing_fits_shows_its_closest_miss(decided):
    rec = decided["recommendations"][-1]
    limit = rec["latency_p90_ms"] / 2   # a budget half the fastest variant's p90
    missed = {**rec, "status": "nothing fits", "artifact": None, "path": None,
              "why": "no variant meets every budget",
              "closest_miss": {"artifact": rec["artifact"], "misses": [
                  {"budget": "latency_p90_ms", "value": rec["latency_p90_ms"], "limit": limit,
                   "over_by": rec["latency_p90_ms"] - limit, "over_by_ratio": 1.0}]}}
    page = render_html({**decided, "recommendations": [missed]})
    card = _card(page, rec["target"])
    assert '<span class="badge bad">none</span>' in card
    assert f"<dd>{escape(rec['artifact'])}</dd>" in card and "<dt>p90</dt>" not in card
    assert f"over the limit {limit:g} by" in card and "+100.0%" in card
    # a target nothing was judged on: its answer and why, no file
    unjudged = decide.recommend("rpi5", [])
    card = _card(render_html({**decided, "recommendations": [unjudged]}), "rpi5")
    assert f">{escape(status_of(unjudged))}</span></h3>" in card
    assert escape(unjudged["why"]) in card and "<dt>file" not in card


def test_hostile_names_are_escaped(decided):
    page = render_html(decided)
    assert HOSTILE not in page and escape(HOSTILE) in page
    assert "img" not in _Page(page).tags


def test_without_plotly_the_other_reports_are_still_written(report, tmp_path, monkeypatch):
    (tmp_path / "report.html").write_text("a page from an earlier run")
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)
    write_reports(tmp_path, report)
    assert (tmp_path / "report.md").is_file() and (tmp_path / "report.json").is_file()
    assert not (tmp_path / "report.html").exists()


def _chromium(page: Path, profile: Path, *args: str) -> str:
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           f"--user-data-dir={profile}", "--virtual-time-budget=5000",
                           "--hide-scrollbars", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")
@pytest.mark.parametrize("which", ["as written", "decided"])
def test_the_page_loads_in_chromium(which, run_dir, report, decided, tmp_path):
    page = (run_dir / "report.html").read_text(encoding="utf-8") if which == "as written" \
        else render_html(decided)
    watched = tmp_path / "watched.html"
    watched.write_text(page.replace("<head>", "<head>" + RECORDER, 1), encoding="utf-8")
    dom = _Page(_chromium(watched, tmp_path / "profile", "--dump-dom"))
    assert dom.recorded == {"__problems": "", "__requests": ""}
    emitted = _Page(page).charts
    assert emitted and dom.drawn == set(emitted)
    assert "img" not in dom.tags
    if which == "decided":
        from PIL import Image
        shot = tmp_path / "page.png"
        _chromium(tmp_path / "watched.html", tmp_path / "profile", f"--screenshot={shot}",
                  "--window-size=1280,2400")
        image = Image.open(shot).convert("RGB")
        assert image.size == (1280, 2400)
        colours = image.getcolors(maxcolors=1 << 20)
        white = next((n for n, c in colours if c == (255, 255, 255)), 0)
        assert len(colours) > 50 and white < 0.97 * 1280 * 2400
