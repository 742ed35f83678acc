"""The pieces report.html is built of: markup made here from escaped parts, and tables
whose every cell from the report is escaped (names and reasons come from users and
from the tools the pipeline ran); the budgets per target, and a target's recommendation
card, which says each of its fields once."""
from __future__ import annotations

import html
import re

from compress.report import decide
from compress.report.mdtext import fmt
from compress.report.notes import machine_of
from compress.report.words import status_of
from profiles.check import METERED, NO_METER, UNMEASURED, meter_headline
from runtimes.safe_text import safe_text

# C0 but tab and newline, DEL and C1, as a script may hold them raw in its strings
_SCRIPT_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_STATUS_CLASS = {decide.SHIP: "good", decide.CANDIDATE: "maybe", decide.NOTHING_FITS: "bad",
                 decide.UNMEASURED: "none"}


class Html(str):
    """Markup built here from escaped parts: a table cell that is not escaped again."""


def escape(value) -> str:
    """`value` (str() of it) as literal HTML text or attribute: a terminal control code
    in it (a profile's device.arch, an op type, a model's input name) shown as its
    escape, visible on the page and inert when the file is printed, then <>&"' escaped."""
    return html.escape(safe_text(value))


def script_text(code: str) -> str:
    """A script inlined in the page with each raw control character written as its
    escape (\\xNN): plotly.js keeps two in string literals, where the escape is the same
    character to JavaScript, and `cat report.html` would send them to the terminal."""
    return _SCRIPT_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", code)


def text(value) -> str:
    return fmt(value, 4, "g")


def _cell(value) -> str:
    if isinstance(value, Html):
        return f"<td>{value}</td>"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'<td class="num">{escape(text(value))}</td>'
    return f"<td>{escape(text(value))}</td>"


def table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def budgets_of(report: dict) -> dict[str, dict[str, float]]:
    """The budget per target: report["budgets"] where present, else (reports written
    before that key) the limits its verdicts were checked against."""
    found: dict[str, dict[str, float]] = {}
    for verdict in report.get("verdicts", []):
        found.setdefault(verdict["target"], {})[verdict["metric"]] = verdict["budget"]
    for target, limits in (report.get("budgets") or {}).items():
        found[target] = {**found.get(target, {}), **(limits or {})}
    return found


def _of(limits: dict, key: str, unit: str = "") -> str:
    return f" (budget {limits[key]:g}{unit})" if limits.get(key) is not None else ""


def _file(rec: dict, report: dict) -> tuple[str, str]:
    """The recommended file, relative to the run folder where it lies inside it (its
    artifact record's path), else as decide gave it; with its format and precision."""
    record = next((a for a in report.get("artifacts") or [] if a.get("id") == rec["artifact"]), {})
    inside, path = (record.get("path") or "").replace("\\", "/"), rec.get("path") or ""
    relative = bool(inside and not inside.startswith("/")
                    and path.replace("\\", "/").endswith("/" + inside))
    shown = inside if relative else path or rec["artifact"]
    kind = " ".join(str(rec[k]) for k in ("format", "precision") if rec.get(k))
    return ("file, in the run folder" if relative else "file",
            f"{shown} ({kind})" + (", the model as given" if rec.get("baseline") else "")
            + ("" if rec["artifact"] in shown else f", variant {rec['artifact']}"))


def _speed(rec: dict, limits: dict) -> list[tuple[str, str]]:
    found, p90 = [], rec.get("latency_p90_ms")
    if p90 is not None:
        span = rec.get("latency_p90_interval_ms")
        spread = f", interval {span[0]:.3g}..{span[1]:.3g} ms" if span else ""
        found.append(("p90", f"{p90:.3g} ms{spread}{_of(limits, 'latency_p90_ms', ' ms')}"))
    lm = rec.get("language_model")
    if lm:
        least = limits.get("decode_tokens_per_s")
        found.append(("decode", f"{lm['decode_tok_s']:.3g} tokens/s"
                                + (f" (budget at least {least:g})" if least is not None else "")
                                + f", first token {lm['ttft_ms']:.3g} ms"
                                + _of(limits, "time_to_first_token_ms", " ms")))
    return found


def _quality(rec: dict, limits: dict) -> str | None:
    if rec.get("language_model") and rec.get("drop") is not None:
        limit = limits.get("perplexity_increase")
        return f"perplexity {rec['drop']:+.2%}" + (
            f" (budget +{limit:.0%})" if limit is not None else "")
    metric = rec.get("metric")
    if not metric:
        return None
    drop = ("" if rec.get("drop") is None
            else f", drop {text(rec['drop'])}{_of(limits, 'accuracy_drop')}")
    return f"{metric['name']} {text(metric['value'])}{drop}"


def _feeding(feeding: dict | None) -> str | None:
    if not feeding:
        return None
    shape = "x".join(str(d) for d in feeding.get("shape") or [])
    parts = [feeding.get("layout"), feeding.get("dtype"), shape or None]
    said = (f"{feeding['name']}: " if feeding.get("name") else "") + " ".join(
        str(p) for p in parts if p)
    if feeding.get("scale") is not None:
        said += f", input scale {feeding['scale']:.6g} zero point {feeding.get('zero_point')}"
    return said


def _bench(rec: dict, report: dict) -> dict:
    return next((b for b in report.get("benchmarks") or [] if b["target"] == rec["target"]
                 and b["artifact"] == rec["artifact"]), {})


def _measured(rec: dict, bench: dict) -> str:
    if rec.get("off_target_reason"):
        return f"off the device: {rec['off_target_reason'].removeprefix('measured ')}"
    return f"on the device: {machine_of(bench)}" if bench.get("measured_on") else "on the device"


def _not_judged(rec: dict, report: dict, bench: dict) -> str | None:
    """The budgets left without a number, each by name; an energy budget with the short
    no-meter line (the full note, what was looked for, is said once per machine)."""
    left = {v["metric"]: v for v in report.get("verdicts") or []
            if v["target"] == rec["target"] and v["artifact"] == rec["artifact"]
            and v["status"] in (NO_METER, UNMEASURED)}
    names = list(dict.fromkeys([*left, *(rec.get("unmeasured") or [])]))
    said = []
    for name in names:
        verdict = left.get(name) or {}
        if name in METERED:
            why = meter_headline(bench.get("energy_note") or verdict.get("reason"))
            why += ", judged where a meter is" if verdict.get("status") == NO_METER else ""
        else:
            why = verdict.get("reason") or "not measured"
        said.append(f"{name}: {why}")
    return "; ".join(said) or None


def _one_miss(m: dict) -> str:
    if m["value"] is None:   # no number: the variant did not run (its runner was killed)
        return f"{m['budget']}: {m.get('reason') or 'not measured'}"
    return (f"{m['budget']} {text(m['value'])} {decide.miss_side(m)} the limit {m['limit']:g} "
            f"by {text(m['over_by'])}"
            + (f" ({m['over_by_ratio']:+.1%})" if m["over_by_ratio"] is not None else ""))


def _fields(rec: dict, report: dict, limits: dict) -> list[tuple[str, str | None]]:
    """A card's rows, each field once; without a file (none, not judged), why and the
    closest miss's misses."""
    if rec.get("artifact") is None:
        miss = rec.get("closest_miss")
        return [("why", rec.get("why")), *([("closest miss", miss["artifact"]),
                ("its misses", "; ".join(_one_miss(m) for m in miss["misses"]))] if miss else [])]
    bench = _bench(rec, report)
    threads = rec.get("threads")
    return [_file(rec, report), *_speed(rec, limits),
            ("size", None if rec.get("model_size_mb") is None
             else f"{rec['model_size_mb']:.3g} MB{_of(limits, 'model_size_mb', ' MB')}"),
            ("quality", _quality(rec, limits)),
            ("peak memory", None if rec.get("peak_memory_mb") is None
             else f"{rec['peak_memory_mb']:.3g} MB{_of(limits, 'peak_memory_mb', ' MB')}"),
            ("engine", f"{rec.get('engine')}" + (f", {threads} thread{'s' * (threads > 1)}"
                                                 if threads else "")),
            ("feed it", _feeding(rec.get("feeding"))), ("measured", _measured(rec, bench)),
            ("not judged here", _not_judged(rec, report, bench)), ("why", rec.get("why"))]


def recommendation_card(rec: dict, report: dict) -> str:
    """One target's answer: "<target>: shippable | candidate | none", then its fields."""
    limits = budgets_of(report).get(rec["target"], {})
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>"
                   for k, v in _fields(rec, report, limits) if v is not None)
    css = _STATUS_CLASS.get(rec.get("status"), "none")
    return (f'<div class="card"><h3>{escape(rec["target"])}: <span class="badge {css}">'
            f"{escape(status_of(rec))}</span></h3><dl>{rows}</dl></div>")
