"""report.md says each thing once, and its first screen says what the run found: the
sentence under the heading, one row per target in "What to ship", each file's path once,
and the terms it uses. One real run on three targets measured on this machine: host-cpu
(its energy budget not judged without a meter), a board of another architecture (its
numbers off the device, its energy budget needing a meter) and a board whose latency
budget nothing meets."""
from __future__ import annotations

import copy
import platform

import pytest

from compress.report.md import render_markdown
from compress.report.mdtext import md
from compress.report.words import GLOSSARY
from tests.conftest import FAST_EXPORT, FAST_INT8, fill_project, pipeline_dict, write_pipeline

OTHER_ARCH = "x86_64" if platform.machine() != "x86_64" else "aarch64"
BOARD = (f"name: board\ndevice: {{arch: {OTHER_ARCH}}}\n"
         "runtime: {engines: [onnxruntime], threads: 1}\n"
         "budget: {latency_p90_ms: 1000, energy_mj: 500}\n")
TIGHT = ("name: tight\ndevice: {arch: any}\nruntime: {engines: [onnxruntime], threads: 1}\n"
         "budget: {latency_p90_ms: 0.000001}\n")
STAGES = [FAST_EXPORT, {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
          {"type": "benchmark", "warmup": 2, "runs": 20, "rounds": 1}]
TARGETS = ("host-cpu", "board", "tight")
FIRST_SCREEN = 40   # lines a terminal or an editor shows before any scrolling


@pytest.fixture(scope="module")
def finished(tmp_path_factory, digits_checkpoint):
    import compress
    folder = fill_project(tmp_path_factory.mktemp("once"), digits_checkpoint)
    (folder / "board.yaml").write_text(BOARD)
    (folder / "tight.yaml").write_text(TIGHT)
    path = write_pipeline(folder, pipeline_dict(
        targets=["host-cpu", "board.yaml", "tight.yaml"], stages=STAGES))
    result = compress.run(path, quiet=True)
    return result, (result.run_dir / "report.md").read_text()


def _section(text: str, heading: str) -> list[str]:
    return text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0].splitlines()


def _metered(report: dict) -> bool:
    return any(b.get("power") for b in report["benchmarks"])


def test_the_full_energy_note_is_said_once(finished):
    result, text = finished
    if _metered(result.report):
        pytest.skip("this machine has a power meter: no note says why there is none")
    [note] = {b["energy_note"] for b in result.report["benchmarks"]}
    assert " (" in note   # what was looked for, after the headline
    assert text.count(md(note)) == 1
    for detail in ("nvml is used only when named", "(ina3221:"):
        assert text.count(md(detail)) <= 1, detail
    # said on the one line for the machine that measured all three targets
    [machine] = [line for line in _section(text, "Where each target was measured")
                 if line.startswith("- ")]
    assert machine.startswith("- **host-cpu, board, tight**: ") and md(note) in machine
    # the footnote under the fits table: one line for both targets, and a pointer
    notes = [line for line in text.splitlines() if line.startswith("- †")]
    assert notes == ["- † energy\\_mj: not judged on host-cpu (no-meter), unmeasured on "
                     "board: no power meter on this host; the full note is under \"Where "
                     "each target was measured\""]


def test_the_first_screen_has_the_answer_the_table_and_the_terms(finished):
    result, text = finished
    lines = text.splitlines()
    assert lines[0] == "# t: FAILED" and not result.passed
    assert lines[2] == "tight has no variant meeting every budget."
    first = lines[:FIRST_SCREEN]
    rows = [line for line in _section(text, "What to ship") if line.startswith("| ")]
    assert rows[0].startswith("| target | answer | file | p90 ms |")
    assert [row.split(" | ")[0] for row in rows[1:]] == [f"| {t}" for t in TARGETS]
    assert set(rows) <= set(first)
    meanings = dict(GLOSSARY)
    for term in ("gated", "shippable", "candidate", "off-target", "no-meter"):
        assert f"- {term}: {meanings[term]}" in first, term


def test_each_target_says_its_answer_once(finished):
    result, text = finished
    recs = {r["target"]: r for r in result.report["recommendations"]}
    rows = {row.split(" | ")[0][2:]: row for row in _section(text, "What to ship")
            if row.startswith("| ") and not row.startswith(("| target", "|---"))}
    host, board, tight = (rows[t] for t in TARGETS)
    assert host.startswith(f"| host-cpu | shippable | {md(recs['host-cpu']['artifact'])} (onnx ")
    assert "| on the device |" in host
    assert board.startswith("| board | candidate |")
    assert f"| off the device: on {md(platform.machine())} " in board
    assert tight.startswith("| tight | none | — |")
    miss = recs["tight"]["closest_miss"]
    assert f"closest: {md(miss['artifact'])} (latency\\_p90\\_ms " in tight
    # each file once, by its path from the run folder, never the absolute one
    section = _section(text, "What to ship")
    start = next(i for i, line in enumerate(section) if line.startswith("Files ("))
    files = [line for line in section[start + 2:section.index("", start + 2)]]
    paths = {a["id"]: a["path"] for a in result.report["artifacts"]}
    shipped = {recs[t]["artifact"] for t in ("host-cpu", "board")}
    assert len(files) == len(shipped)
    for artifact in shipped:
        assert len([f for f in files if f.startswith(f"- {md(paths[artifact])} (")]) == 1
    assert str(result.run_dir) not in "\n".join(_section(text, "What to ship"))


def test_a_missed_budget_says_its_value_and_limit_and_stays_visible(finished):
    result, text = finished
    fits = [f for f in result.report["fits"] if f["target"] == "tight"]
    assert fits and all(f["fits"].startswith("no: over budget on latency_p90_ms (")
                        and f["fits"].endswith(" over 1e-06)") for f in fits), fits
    failed = [v for v in result.report["verdicts"]
              if v["target"] == "tight" and v["status"] == "fail"]
    assert len(failed) == len(fits)
    for verdict in failed:
        assert (f"| tight | {md(verdict['artifact'])} | latency\\_p90\\_ms | 1e-06 ms | "
                f"{verdict['value']:.4f} | fail |") in text


def test_the_sentence_names_the_candidates_when_the_run_passes(finished):
    result, _ = finished
    report = copy.deepcopy(result.report)
    report["gated_targets"] = ["board", "host-cpu"]
    report["passed"] = True
    lines = render_markdown(report).splitlines()
    assert lines[:3] == ["# t: PASSED", "", "Every gated target has a variant to ship "
                         "(board: a candidate, measured off the device)."]
    report["strict"], report["passed"] = True, False
    assert render_markdown(report).splitlines()[2] == (
        "board has only a candidate (measured off the device), which --strict does not count.")
    report["gated_targets"] = []
    assert render_markdown(report).splitlines()[2].startswith("No target's budgets decide")
