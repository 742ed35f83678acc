"""What `compress run` ends with (compress.report.terminal): one line per target, each
budget without a number said once, misses named with their numbers."""
from __future__ import annotations

from compress.report.terminal import closing_lines
from compress.report.words import GLOSSARY, status_of


def test_the_quickstart_run_ends_with_one_line_per_target_and_no_meter_once(quickstart_run):
    _, _, result = quickstart_run
    lines = closing_lines(result.report, result.passed, "report.md")
    text = "\n".join(lines)
    # the machine has no meter: said once over both targets, in one short line
    assert text.count("no power meter") == 1 and "(ina3221:" not in text
    assert "energy_mj not judged on host-cpu, rpi4: no power meter on this host" in text
    per_target = [line for line in lines if line.startswith(("host-cpu: ", "rpi4: "))
                  and " not measured: " not in line and " misses " not in line]
    assert [line.split(":")[0] for line in per_target] == ["host-cpu", "rpi4"]
    for line, rec in zip(per_target, result.report["recommendations"]):
        assert line.startswith(f"{rec['target']}: {status_of(rec)} {rec['artifact']} (")
        assert f"p90 {rec['latency_p90_ms']:.3g} ms" in line and line.endswith(rec["path"])
    assert lines[-1].startswith("PASSED: something to ship on every gated target")
    assert all(len(line) < 300 for line in lines), max(lines, key=len)


def _report(**rec) -> dict:
    base = {"target": "board", "status": "nothing fits", "why": "no variant meets every budget",
            "closest_miss": {"artifact": "02-quantize", "misses": []}}
    return {"verdicts": [
        {"artifact": "02-quantize", "target": "board", "metric": "latency_p90_ms",
         "budget": 10.0, "value": 12.5, "status": "fail", "reason": ""},
        {"artifact": "02-quantize", "target": "board", "metric": "accuracy_drop",
         "budget": 0.01, "value": 0.0156, "status": "fail", "reason": ""},
        {"artifact": "03-export.tflite", "target": "board", "metric": "latency_p90_ms",
         "budget": 10.0, "value": None, "status": "fail",
         "reason": "did not run: the runner was killed by SIGKILL"}],
        "recommendations": [{**base, **rec}], "gated_targets": ["board"], "strict": False,
        "benchmarks": [], "fits": []}


def test_misses_are_named_with_their_numbers_and_nothing_to_ship_fails():
    lines = closing_lines(_report(), False, "r.md")
    assert lines[0] == ("board: 02-quantize misses latency_p90_ms 12.5 ms (over 10 ms); "
                        "accuracy_drop 0.0156 (over 0.01)")
    assert lines[1] == "board: 03-export.tflite did not run: the runner was killed by SIGKILL"
    assert lines[2] == ("board: none (no variant meets every budget; closest: 02-quantize)")
    assert lines[3] == "FAILED: nothing to ship on board (none); report: r.md"


def test_a_strict_run_says_why_a_candidate_does_not_count():
    rec = {"status": "candidate", "artifact": "02-quantize", "format": "onnx",
           "precision": "int8", "latency_p90_ms": 3.0, "model_size_mb": 1.5, "drop": 0.001,
           "measured_on_device": False, "path": "/r/02-quantize/model.onnx",
           "language_model": None}
    report = {**_report(**rec), "strict": True}
    assert closing_lines(report, False, "r.md")[-1] == (
        "FAILED: nothing to ship on board (candidate) (--strict: a candidate does not "
        "count); report: r.md")
    assert closing_lines({**report, "strict": False}, True, "r.md")[-1] == (
        "PASSED: something to ship on every gated target (board: a candidate only, check "
        "it on the device); report: r.md")


def test_the_glossary_names_the_words_the_outputs_use():
    terms = [term for term, _ in GLOSSARY]
    assert {"gated", "shippable", "candidate", "off-target", "no-meter"} <= set(terms)
    assert all(len(meaning) < 160 for _, meaning in GLOSSARY)
