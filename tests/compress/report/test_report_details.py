"""The report's details (issue 17): Markdown-safe text, one reason per target for budgets
without a number, the threads the measurements used, noisy measurements, load and first
inference times, and host-cpu's energy budget, which --strict judges only where a meter
is. One real quickstart run serves every test; the unit tests work on dicts taken from
its report."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys

import pytest

from compress.runner.manifest import measured_threads
from compress.report.mdtext import md
from compress.report.build import render_markdown
from compress.report.notes import (NOISY_MIN_EXCESS_MS, NOISY_P90_RATIO, NOISY_P99_RATIO,
                                   mark_noisy, noisy_reason)
from profiles import NO_METER, UNMEASURED, check, load_profile
from tests.conftest import (FAST_EXPORT, FAST_INT8, fill_project, pipeline_dict, run_cli, write_pipeline)

# A board whose energy budget needs a meter (power.required defaults to true), like the
# Jetson and Pi 5 profiles: gated, it must fail --strict on a machine without one.
METERED = ("name: metered\ndevice: {arch: any}\nruntime: {engines: [onnxruntime], threads: 1}\n"
           "budget: {latency_p90_ms: 1000, energy_mj: 500}\n")
STAGES = [FAST_EXPORT, {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
          {"type": "benchmark", "warmup": 2, "runs": 20, "rounds": 1}]
HOSTILE = "a|b*c_d`e[f]<g>&h~i\n# not a heading"


@pytest.fixture(scope="module")
def finished(tmp_path_factory, digits_checkpoint):
    """`compress run --strict` with host-cpu gated and the metered board reported only."""
    folder = fill_project(tmp_path_factory.mktemp("details"), digits_checkpoint)
    (folder / "metered.yaml").write_text(METERED)
    targets = ["host-cpu", {"profile": "metered.yaml", "gate": False}]
    path = write_pipeline(folder, pipeline_dict(targets=targets, stages=STAGES))
    child = run_cli("run", path, "--strict", "--quiet", cwd=folder)
    run_dir = folder / "runs" / "t"
    report = json.loads((run_dir / "report.json").read_text()) if child.returncode < 2 else None
    return folder, child, report, run_dir


def _meter_here(report: dict) -> bool:
    return any(b.get("power") for b in report["benchmarks"])


def _verdicts(report: dict, target: str, metric: str) -> list[dict]:
    return [v for v in report["verdicts"] if v["target"] == target and v["metric"] == metric]


def test_strict_passes_on_host_cpu_when_every_measured_budget_passes(finished):
    _, child, report, _ = finished
    assert child.returncode == 0, child.stdout + child.stderr
    assert report["passed"] and report["strict"]
    for verdict in _verdicts(report, "host-cpu", "energy_mj"):
        # judged where a meter is found; with none it is no-meter, which strict accepts
        assert verdict["status"] == ("pass" if _meter_here(report) else NO_METER)


def test_a_profile_that_requires_a_meter_still_fails_strict(finished):
    folder, _, report, _ = finished
    if _meter_here(report):
        pytest.skip("this machine has a power meter: the energy budget is judged")
    assert {v["status"] for v in _verdicts(report, "metered", "energy_mj")} == {UNMEASURED}
    # a run folder of its own: the other tests read the first run's
    path = write_pipeline(folder, pipeline_dict(name="metered", targets=["metered.yaml"],
                                                stages=STAGES), name="metered-pipeline.yaml")
    child = run_cli("run", path, "--strict", "--quiet", cwd=folder)
    assert child.returncode == 1, child.stdout + child.stderr


def test_device_profiles_with_meters_keep_requiring_them(finished):
    _, _, report, _ = finished
    measured = {**report["benchmarks"][0], "energy_mj": None, "power": None}
    for name in ("rpi5", "jetson-nano", "jetson-orin-nano", "host-cpu"):
        profile = load_profile(name)
        energy = next(v for v in check(measured, profile, "m", name) if v.metric == "energy_mj")
        assert energy.status == (NO_METER if name == "host-cpu" else UNMEASURED), name
    # a meter that was there but gave nothing is unmeasured, even where it is optional
    silent = {**measured, "power": {"meter": "rapl", "mean_w": None}}
    energy = next(v for v in check(silent, load_profile("host-cpu"), "m", "host-cpu")
                  if v.metric == "energy_mj")
    assert energy.status == UNMEASURED


def test_the_reason_for_a_missing_number_is_said_once_per_target(finished):
    _, _, report, run_dir = finished
    if _meter_here(report):
        pytest.skip("this machine has a power meter: every energy budget has a number")
    reasons = report["unmeasured_reasons"]
    energy = _verdicts(report, "metered", "energy_mj")
    assert reasons["metered"]["energy_mj"] == energy[0]["reason"]
    assert len(energy) == 2   # the baseline and the INT8 variant, one reason
    assert "budget applies where a meter is" in reasons["host-cpu"]["energy_mj"]
    assert all(f["fits"] in ("yes, except unmeasured: energy_mj",
                             "yes (energy_mj: no meter here)", "yes")
               for f in report["fits"]), report["fits"]
    text = (run_dir / "report.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert not any(md(energy[0]["reason"]) in row for row in rows)
    # one line for both targets, measured on one machine with no meter: host-cpu's
    # budget is not judged (its profile's meter is optional), metered's unmeasured
    note = (f"- † energy\\_mj: not judged on host-cpu (no-meter), unmeasured on metered: "
            f"{md(energy[0]['reason'])}; the full note is under \"Where each target was "
            "measured\"")
    assert text.count(note) == 1 and text.count("- † ") == 1
    assert "| metered | 02-quantize | energy\\_mj | 500 mJ | — | unmeasured† |" in text


def test_the_manifest_names_the_threads_the_measurements_ran_with(finished):
    _, _, report, run_dir = finished
    used = {t: sorted({b["runtime"]["threads"] for b in report["benchmarks"]
                       if b["target"] == t}) for t in ("host-cpu", "metered")}
    assert used["metered"] == [1]
    assert report["manifest"]["threads"] == {t: found[0] for t, found in used.items()}
    assert json.loads((run_dir / "manifest.json").read_text())["threads"] == \
        report["manifest"]["threads"]
    assert (f"- threads the measurements ran with, per target: host-cpu "
            f"{used['host-cpu'][0]}, metered 1 (") in (run_dir / "report.md").read_text()
    # threads that differ between measurements are all named; nothing measured: None
    other = copy.deepcopy(report["benchmarks"][0])
    other["runtime"]["threads"] = 7
    threads = measured_threads([*report["benchmarks"], other],
                               [("host-cpu", None), ("metered", None), ("idle", None)])
    assert threads == {"host-cpu": sorted({used["host-cpu"][0], 7}), "metered": 1,
                       "idle": None}


def test_load_and_first_run_times_are_in_the_benchmark_table(finished):
    _, _, report, run_dir = finished
    text = (run_dir / "report.md").read_text()
    assert "| load ms / first run ms |" in text
    for bench in report["benchmarks"]:
        assert bench["load_ms"] > 0 and bench["first_run_ms"] > 0
        assert f"| {bench['load_ms']:.1f} / {bench['first_run_ms']:.3f} |" in text


def test_the_runner_prints_load_and_first_inference_times(finished):
    _, _, _, run_dir = finished
    child = subprocess.run([sys.executable, "-m", "runtimes", "bench",
                            str(run_dir / "02-quantize" / "model.onnx"), "--runs", "5",
                            "--warmup", "1", "--threads", "1"],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert re.search(r"load\s+\d+\.\d ms.*, first inference \d+\.\d{3} ms", child.stdout), \
        child.stdout


def test_noisy_rule_on_latencies_from_the_run(finished):
    _, _, report, _ = finished
    for record in [*report["benchmarks"], *report["engine_baselines"]]:
        if record.get("latency_ms"):   # what the report marked is what the rule says
            assert record.get("noisy") == noisy_reason(record["latency_ms"])
    latency = dict(report["benchmarks"][0]["latency_ms"], p50=1.9, p90=2.2, p99=7.9)
    assert noisy_reason(latency) == "p99 7.9 ms is 4.2x the median 1.9 ms"
    assert noisy_reason(dict(latency, p99=1.9 * NOISY_P99_RATIO)) is None
    assert noisy_reason(dict(latency, p99=3.6, p90=1.9 * NOISY_P90_RATIO + 0.6)) == \
        "p90 3.45 ms is 1.8x the median 1.9 ms"
    # a tiny model's tail far above its median, but by less than a scheduler slice
    tiny = dict(latency, p50=0.01, p90=0.012, p99=0.01 + NOISY_MIN_EXCESS_MS / 2)
    assert noisy_reason(tiny) is None


def test_a_noisy_measurement_is_warned_about_under_its_target(finished):
    _, _, report, _ = finished
    report = copy.deepcopy(report)
    for record in report["benchmarks"]:
        record.pop("noisy", None)
    bench = next(b for b in report["benchmarks"]
                 if b["target"] == "host-cpu" and b["artifact"] == "02-quantize")
    bench["latency_ms"].update(p50=1.9, p90=2.2, p99=7.9)
    mark_noisy(report["benchmarks"])
    lines = render_markdown(report).splitlines()
    warning = ("  - warning: host-cpu 02-quantize: noisy measurement (p99 7.9 ms is 4.2x the "
               "median 1.9 ms): close other programs or raise benchmark.runs/rounds")
    assert lines.count(warning) == 1
    # both targets were measured on this machine: one line says it, the warning under it
    section = lines.index("## Where each target was measured")
    machine = next(i for i, line in enumerate(lines) if i > section and line.startswith("- "))
    assert lines[machine].startswith("- **host-cpu, metered**: ")
    end = next(i for i, line in enumerate(lines) if i > machine and not line.startswith("  - "))
    assert machine < lines.index(warning) < end


def test_md_escapes_what_markdown_would_read_as_formatting():
    assert md(HOSTILE) == ("a\\|b\\*c\\_d\\`e\\[f\\]\\<g\\>\\&h\\~i # not a heading")
    assert md("# title") == "\\# title"
    assert md("back\\slash") == "back\\\\slash"
    assert md(12) == "12"


def _cells(line: str) -> int:
    """How many cell separators a table row has (escaped pipes are cell text)."""
    count, escaped = 0, False
    for char in line:
        count += char == "|" and not escaped
        escaped = char == "\\" and not escaped
    return count


def _hostile(report: dict) -> dict:
    """The run's report with every name, reason and host a user or library gives
    replaced by text full of Markdown syntax and newlines."""
    report = copy.deepcopy(report)
    names = {"host-cpu": HOSTILE + " target", "02-quantize": HOSTILE + " artifact"}
    for section in ("benchmarks", "verdicts", "fits", "engine_baselines", "gains",
                    "recommendations"):
        for row in report.get(section) or []:
            for key in ("target", "artifact", "baseline"):
                if isinstance(row.get(key), str):
                    row[key] = names.get(row[key], row[key])
    for verdict in report["verdicts"]:
        verdict["reason"] = verdict["reason"] and HOSTILE + " reason"
    for rec in report["recommendations"]:
        rec["why"], rec["path"] = HOSTILE + " why", HOSTILE + " path"
    for bench in report["benchmarks"]:
        bench["measured_on"]["hostname"] = HOSTILE + " host"
        bench["energy_note"] = HOSTILE + " meter"
        bench["metric"]["name"] = HOSTILE + " metric"
    report["pipeline"]["name"] = "#" + HOSTILE
    report["manifest"]["host"]["cpu"] = HOSTILE
    report["cleanup_warnings"] = [HOSTILE + " left on the device"]
    return report


def test_hostile_names_and_reasons_break_no_table_and_format_nothing(finished):
    _, _, report, _ = finished
    text = render_markdown(_hostile(report))
    lines = text.splitlines()
    assert lines[0] == f"# {md('#' + HOSTILE)}: PASSED"   # one heading, of our own
    assert md("#" + HOSTILE).startswith("\\#a\\|b") and not any(
        line.startswith("# not a heading") for line in lines)
    table, width = [], None
    for line in [*lines, ""]:
        if line.startswith("|"):
            width = width or _cells(line)
            assert _cells(line) == width, line
            table.append(line)
        else:
            width = None
    for name in ("target", "artifact", "why"):   # there, escaped
        assert any(md(f"{HOSTILE} {name}") in row for row in table), name
    assert f"unmeasured on metered: {md(HOSTILE + ' reason')}; the full note" in text
    for raw in ("<g>", "`e", "*c", "[f]", "~i", "&h"):   # none left unescaped
        assert not re.search(r"(?<!\\)" + re.escape(raw), text), raw
