"""report.md: the report for people. Every text from a user or a library (ids, names,
reasons, errors, paths) goes through md(), so none can break a table or format text."""
from __future__ import annotations

from compress.report.mdtext import fmt, md
from compress.report.words import STRICT_MEANS
from compress.report.recommend_md import (glossary_lines, recommendation_lines,
                                          search_lines, verdict_sentence)
from compress.report.md_tables import (artifact_table, benchmark_table, model_table,
                                       judge_lines, placement_table,
                                       quantization_details)
from compress.report.fleet import fleet_lines
from compress.report.md_floor import floor_details
from compress.report.md_lm import is_language_model, lm_benchmark_table, mix_details
from compress.report.notes import (NO_NUMBER, footnote_groups, hottest, how_measured, machine_of,
                                   machine_text)
from profiles import NO_METER, UNITS
from runtimes.safe_text import safe_text

NOTE = "†"   # marks a row whose budgets without a number are explained under the table
NOISY_ADVICE = "close other programs or raise benchmark.runs/rounds"
MEASURED_ON = "Where each target was measured"
FITS = "Which variant fits which device"


def _noted_pairs(report: dict) -> set:
    return {(v["artifact"], v["target"]) for v in report["verdicts"] if v["status"] in NO_NUMBER}


def _footnote(group: dict) -> str:
    """One line per reason: an energy budget's missing meter once for every target it
    left without a number, its full note pointed to (said once per machine)."""
    if not group["metered"]:
        [part] = group["parts"]
        what = "not judged (no meter here)" if part["status"] == NO_METER else "unmeasured"
        return (f"- {NOTE} {md(part['target'])}: {md(', '.join(group['budgets']))} {what} "
                f"on {_variants(part)}: {md(group['reason'])}")
    said = []
    for part in group["parts"]:
        notes = ["no-meter"] if part["status"] == NO_METER else []
        notes += [] if part["every"] else [_variants(part)]
        said.append(f"{'not judged' if part['status'] == NO_METER else 'unmeasured'} on "
                    f"{md(part['target'])}" + (f" ({'; '.join(notes)})" if notes else ""))
    return (f"- {NOTE} {md(', '.join(group['budgets']))}: {', '.join(said)}: "
            f"{md(group['reason'])}; the full note is under \"{MEASURED_ON}\"")


def _variants(part: dict) -> str:
    return "every variant" if part["every"] else ", ".join(md(a) for a in part["artifacts"])


def reason_lines(report: dict) -> list[str]:
    """Why budgets have no number, said once (the rows only carry NOTE)."""
    lines = [_footnote(group) for group in footnote_groups(report["verdicts"])]
    return ["", *lines] if lines else []


def _fits_table(report: dict) -> list[str]:
    noted = _noted_pairs(report)
    lines = ["| target | artifact | fits |", "|---|---|---|"]
    lines += [f"| {md(f['target'])} | {md(f['artifact'])}{' (baseline)' if f['baseline'] else ''}"
              f" | {md(f['fits'])}{NOTE if (f['artifact'], f['target']) in noted else ''} |"
              for f in report["fits"]]
    return lines + reason_lines(report)


def _verdict_table(report: dict) -> list[str]:
    lines = ["| target | artifact | budget | limit | value | verdict |", "|---|---|---|---:|---:|---|"]
    for v in report["verdicts"]:
        unit = UNITS.get(v["metric"], "")
        if v["status"] in NO_NUMBER:   # its reason is said once, under the table
            status = v["status"] + NOTE
        else:
            status = v["status"] + (f" ({md(v['reason'])})" if v["reason"] else "")
        lines.append(f"| {md(v['target'])} | {md(v['artifact'])} | {md(v['metric'])} | "
                     f"{v['budget']:g} {unit} | {fmt(v['value'], 4)} | {status} |")
    if _noted_pairs(report):
        lines += ["", f"{NOTE} Why these have no number is said once, under \"{FITS}\"."]
    return lines


def _conditions_summary(conditions: dict | None) -> str:
    """'governor schedutil, hottest zone 47.5 -> 49.0 °C, nvpmodel MAXN, jetson_clocks on'."""
    if not conditions:
        return ""
    before, after = conditions.get("before") or {}, conditions.get("after") or {}
    parts = []
    if before.get("governors"):
        parts.append(f"governor {md('/'.join(before['governors']))}")
    start, end = hottest(before), hottest(after)
    if start is not None and end is not None:
        parts.append(f"hottest zone {start:.1f} -> {end:.1f} °C")
    if before.get("nvpmodel"):
        parts.append(f"nvpmodel {md(before['nvpmodel']['mode'])}")
    if before.get("jetson_clocks"):
        parts.append(f"jetson_clocks {'on' if before['jetson_clocks']['on'] else 'off'} "
                     "(inferred)")
    if conditions.get("cpu_affinity"):
        parts.append(f"on CPUs {md(conditions['cpu_affinity'])}")
    return ", ".join(parts)


def _meter_text(b: dict) -> str:
    """The power meter that measured, or why none did: the benchmark's full energy note,
    which nothing else in the report repeats."""
    power = b.get("power")
    if not power:
        return f"energy unmeasured: {md(b.get('energy_note') or 'no power meter')}"
    rate = f", {power['sample_rate_hz']:.1f} samples/s" if power.get("sample_rate_hz") else ""
    return f"power meter {md(power['meter'])} ({md(power['detail'])}{rate})"


def _machines(report: dict) -> list[list[dict]]:
    """The first benchmark of each target, grouped by the machine that measured it (its
    description, the host reached, its power meter or why none, emulation): one line
    says a machine once for every target it measured."""
    groups: dict[tuple, list[dict]] = {}
    first: dict[str, dict] = {}
    for b in report["benchmarks"]:
        first.setdefault(b["target"], b)
    for b in first.values():
        key = (machine_of(b), _meter_text(b), b.get("emulated"))
        groups.setdefault(key, []).append(b)
    return list(groups.values())


def _each(group: list[dict], text_of) -> str:
    """What the targets of a group say: once where all say the same, else per target."""
    texts = [text_of(b) for b in group]
    if len(set(texts)) == 1:
        return texts[0]
    return "; ".join(f"{md(b['target'])}: {text}" for b, text in zip(group, texts) if text)


def _machine_line(group: list[dict]) -> str:
    first = group[0]
    conditions = _each(group, lambda b: _conditions_summary(b.get("conditions")))
    emulated = (f" **Emulated ({md(first['emulated'])}): timings are not the device's and "
                "are never checked against its budget.**" if first.get("emulated") else "")
    return (f"- **{', '.join(md(b['target']) for b in group)}**: "
            f"{machine_text(first['measured_on'], md)}, "
            f"{_each(group, lambda b: how_measured(b.get('remote'), md))}; {_meter_text(first)}"
            f"{'; ' + conditions if conditions else ''}.{emulated}")


def _where_measured(report: dict) -> list[str]:
    """One line per machine and the targets it measured: how (SSH costs), power meter,
    then conditions worth a warning and measurements too noisy to trust."""
    lines = []
    measured = [*report["benchmarks"], *(b for b in report.get("engine_baselines") or []
                                         if b.get("latency_ms"))]
    for group in _machines(report):
        lines.append(_machine_line(group))
        targets = {b["target"] for b in group}
        mine = [x for x in measured if x["target"] in targets]
        warnings = sorted({w for x in mine
                           for w in ((x.get("conditions") or {}).get("warnings") or [])})
        lines += [f"  - warning: {md(w)}" for w in warnings]
        lines += [f"  - warning: {md(x['target'])} {md(x['artifact'])}"
                  f"{' on ' + md(x['engine']) if x.get('comparison') else ''}: noisy "
                  f"measurement ({x['noisy']}): {NOISY_ADVICE}" for x in mine if x.get("noisy")]
    lines += [f"- warning: {md(w)}" for w in report.get("cleanup_warnings", [])]
    return lines


def _threads_text(threads: dict) -> str:
    def used(value) -> str:
        if value is None:
            return "— (nothing measured)"
        if isinstance(value, list):
            return f"{' and '.join(map(str, value))} (not the same in every measurement)"
        return str(value)
    return ", ".join(f"{md(target)} {used(value)}" for target, value in threads.items()) or "—"


def _manifest_lines(report: dict) -> list[str]:
    m = report["manifest"]
    host = m["host"]
    return [f"- packages: {md(', '.join(f'{k} {v}' for k, v in m['packages'].items() if v))}",
            f"- host: {md(host['hostname'])}, {md(host['arch'])}, {md(host['cpu'])}, "
            f"{host['cores']} cores, flags {md(' '.join(host['cpu_flags'])) or '—'}",
            f"- threads the measurements ran with, per target: {_threads_text(m['threads'])} "
            f"(the profile's runtime.threads, capped at the measuring machine's cores); "
            f"seed {m['seed']}",
            f"- config sha256 {m['config_sha256']}; source model sha256 "
            f"{m['source_model_sha256']}", ""]


def _benchmark_section(report: dict) -> list[str]:
    if is_language_model(report):
        return ["## Benchmarks (language model)", "", *lm_benchmark_table(report), ""]
    return ["## Benchmarks (batch as declared)", "", *benchmark_table(report), "",
            "peak MB is the benchmark process's peak resident memory; (model) is that minus "
            "the interpreter and runtime library before the model was loaded.", ""]


def render_markdown(report: dict) -> str:
    details = quantization_details(report) + floor_details(report) + mix_details(report)
    details = ["## Quantization details", "", *details] if details else []
    verdict = "PASSED" if report["passed"] else "FAILED"
    strict = f" ({STRICT_MEANS})" if report["strict"] else ""
    head = [f"# {md(report['pipeline']['name'])}: {verdict}", "", *verdict_sentence(report),
            *recommendation_lines(report),
            f"Gated targets: {md(', '.join(report['gated_targets'])) or 'none'}{strict}."
            " The baseline (the model as given, exported in each engine's format) is measured "
            "for comparison and is not gated.", ""]
    rest = [*search_lines(report.get("search")),
            f"## {FITS}", "", *_fits_table(report), "",
            "## What each stage did to the model", "", *model_table(report), "",
            "## Artifacts", "", *artifact_table(report), "",
            *details,
            f"## {MEASURED_ON}", "", *_where_measured(report), "",
            *fleet_lines(report),
            *_benchmark_section(report),
            *placement_table(report),
            "## Verdicts", "", *judge_lines(report), *_verdict_table(report), "",
            "## Manifest", "", *_manifest_lines(report)]
    # the terms explained on the first screen: those the rest of the report uses
    lines = [*head, *glossary_lines("\n".join(head + rest)), *rest]
    # md() makes each field safe; this pass covers text a table puts in unescaped (a
    # trial's state, a strategy, a hash read back from a report), so that no terminal
    # control code from a report's data reaches whoever runs `cat report.md`
    return safe_text("\n".join(lines))
