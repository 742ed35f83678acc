"""Decisions that survive noise: a variant's p90 carries its rounds' interval; variants
whose intervals overlap are a tie, broken by size, fidelity, integer precision, name, so
the same measurements in any order, or a hair apart, give the same pick; `compress
compare` calls a p90 change a change only beyond both runs' noise."""
import itertools

import pytest
from hypothesis import given, settings, strategies as st

from compress.measure import noise
from compress.report import decide
from compress.report.decide import Variant
from compress.runner.compare import compare


def _variant(name, p90, size, drop=0.0, span=None, precision="int8", target="host-cpu",
             engine="onnxruntime"):
    verdicts = ({"artifact": name, "target": target, "metric": "latency_p90_ms", "budget": 10.0,
                 "value": p90, "status": "pass", "reason": ""},)
    return Variant(name, target, False, size, verdicts, p90, 30.0,
                   {"name": "accuracy", "value": 0.9 - drop}, drop, engine,
                   {"path": f"/runs/x/{name}/model.onnx", "format": "onnx",
                    "precision": precision}, p90_interval=span)


def test_overlapping_intervals_tie_and_the_smaller_file_wins_whichever_p90_is_lower():
    # the quickstart's case: FP32 0.0205 ms vs INT8 0.0215 ms, rounds spread 0.019..0.025
    fp32 = _variant("01-export.onnx", 0.0205, 0.05, span=(0.0190, 0.0250), precision="fp32")
    int8 = _variant("02-quantize.onnx", 0.0215, 0.02, span=(0.0200, 0.0240))
    for first, second in ((fp32, int8), (int8, fp32)):
        rec = decide.recommend("host-cpu", [first, second])
        assert rec["artifact"] == "02-quantize.onnx"
        # each interval at least as wide as the widest of its engine's (fp32's, here)
        assert rec["why"].startswith("tied with 01-export.onnx within the measured noise "
                                     "(p90 0.0199..0.0262 ms vs 0.019..0.025 ms); smaller")
        low, high = rec["latency_p90_interval_ms"]
        assert low <= 0.0200 and high >= 0.0240
    # the same p90s the other way round: still a tie, still the smaller file
    faster_int8 = _variant("02-quantize.onnx", 0.0195, 0.02, span=(0.0190, 0.0240))
    assert decide.recommend("host-cpu", [fp32, faster_int8])["artifact"] == "02-quantize.onnx"


def test_intervals_apart_the_faster_wins():
    fast = _variant("fast-big", 1.0, 9.0, span=(0.98, 1.02))
    slow = _variant("slow-small", 1.5, 1.0, span=(1.40, 1.60))
    rec = decide.recommend("host-cpu", [slow, fast])
    assert rec["artifact"] == "fast-big"
    assert "the fastest p90" in rec["why"] and "next: slow-small" in rec["why"]


def test_an_engine_that_swung_widely_on_the_target_widens_its_variants_alike():
    # LiteRT on two threads: one file 0.025 or 0.165 ms by process; another file's three
    # rounds all landed slow, the ONNX Runtime file measured steadily
    swung = _variant("baseline-tflite", 0.15, 0.10, span=(0.025, 0.16), engine="litert",
                     precision="fp32")
    all_slow = _variant("03-export.tflite", 0.17, 0.03, span=(0.155, 0.18), engine="litert")
    steady = _variant("02-quantize", 0.06, 0.04, span=(0.055, 0.065))
    rec = decide.recommend("host-cpu", [swung, all_slow, steady])
    assert rec["artifact"] == "03-export.tflite" and rec["why"].startswith("tied with")
    # without a swinging variant of its engine, the all-slow file is simply slower
    rec = decide.recommend("host-cpu", [all_slow, steady])
    assert rec["artifact"] == "02-quantize" and "fastest" in rec["why"]


def test_without_intervals_the_band_is_the_tie_ratio():
    a = _variant("a", 4.0, 5.0)
    assert decide.recommend("host-cpu", [a, _variant("b", 4.0 * 1.029, 3.0)])["artifact"] == "b"
    assert decide.recommend("host-cpu", [a, _variant("c", 4.0 * 1.031, 3.0)])["artifact"] == "a"
    low, high = noise.band(4.0)
    assert high / low == pytest.approx(1 + noise.TIE_RATIO)


def test_the_tie_break_order_is_size_then_drop_then_precision_then_name():
    span = (0.9, 1.1)
    def v(name, size, drop, precision):
        return _variant(name, 1.0, size, drop, span, precision)
    assert decide.recommend("host-cpu", [v("z", 1.0, 0.01, "fp32"),
                                         v("a", 2.0, 0.0, "int8")])["artifact"] == "z"
    rec = decide.recommend("host-cpu", [v("z", 1.0, 0.001, "fp32"), v("a", 1.0, 0.002, "int8")])
    assert rec["artifact"] == "z" and "closer to the original" in rec["why"]
    rec = decide.recommend("host-cpu", [v("z", 1.0, 0.0, "int8"), v("a", 1.0, 0.0, "fp16"),
                                        v("b", 1.0, 0.0, "fp32")])
    assert rec["artifact"] == "z" and "integer" in rec["why"]
    assert decide.recommend("host-cpu", [v("b", 1.0, 0.0, "fp16"),
                                         v("a", 1.0, 0.0, "fp32")])["artifact"] == "b"
    assert decide.recommend("host-cpu", [v("b", 1.0, 0.0, "int8"),
                                         v("a", 1.0, 0.0, "int8")])["artifact"] == "a"


_PRECISIONS = ("int8", "fp16", "fp32", "fp32 (nothing was quantized)")


@st.composite
def _variants(draw):
    count = draw(st.integers(2, 6))
    found = []
    for index in range(count):
        p90 = draw(st.floats(0.01, 2.0))
        low = p90 * draw(st.floats(0.7, 1.0))
        high = p90 * draw(st.floats(1.0, 1.4))
        found.append(_variant(f"v{index}", p90, draw(st.sampled_from((0.5, 1.0, 2.0))),
                              draw(st.sampled_from((0.0, 0.002, 0.01))),
                              draw(st.sampled_from((None, (low, high)))),
                              draw(st.sampled_from(_PRECISIONS))))
    return found


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_variants(), st.randoms(use_true_random=False))
def test_any_order_of_the_same_variants_gives_the_same_pick(variants, random):
    pick = decide.recommend("host-cpu", variants)
    shuffled = list(variants)
    random.shuffle(shuffled)
    again = decide.recommend("host-cpu", shuffled)
    assert (again["artifact"], again["why"]) == (pick["artifact"], pick["why"])


def test_every_permutation_of_tied_variants_gives_one_pick():
    span = (0.018, 0.026)
    variants = [_variant("01-export.onnx", 0.0205, 0.05, span=span, precision="fp32"),
                _variant("02-quantize.onnx", 0.0221, 0.02, span=span),
                _variant("03-export.tflite", 0.0215, 0.02, span=span, precision="int8")]
    picks = {decide.recommend("host-cpu", list(order))["artifact"]
             for order in itertools.permutations(variants)}
    assert picks == {"02-quantize.onnx"}   # as small as the TFLite: the name decides


def test_a_record_keeps_its_rounds_and_an_interval_at_least_the_band():
    rounds = [[1.0] * 9 + [1.1], [1.0] * 9 + [1.3], [1.0] * 10]
    added = noise.per_round(rounds, 1.1)
    assert len(added["p90_rounds"]) == 3 and len(added["p50_rounds"]) == 3
    low, high = added["p90_interval"]
    assert low <= min(added["p90_rounds"]) and high >= max(added["p90_rounds"])
    assert (low, high) != noise.band(1.1)
    agreeing = noise.per_round([[2.0] * 10] * 3, 2.0)["p90_interval"]
    assert agreeing == list(noise.band(2.0))


def test_only_close_and_wide_variants_are_measured_again():
    rows = {0: ("t", 1.0, (0.7, 1.4)), 1: ("t", 1.1, (1.0, 1.2)), 2: ("t", 3.0, (2.9, 3.1)),
            3: ("u", 1.0, (0.99, 1.01)), 4: ("u", 1.02, (1.0, 1.03))}
    assert noise.to_settle(rows) == [0, 1]


def _report(p90, span=None, artifact="01-export.onnx"):
    latency = {"p90": p90, **({"p90_interval": list(span)} if span else {})}
    return {"pipeline": {"config": {"name": "q"}}, "manifest": {"packages": {}},
            "passed": True, "verdicts": [], "recommendations": [],
            "benchmarks": [{"target": "host-cpu", "artifact": artifact, "latency_ms": latency,
                            "size_bytes": 2**20, "peak_memory_mb": 30.0, "metric": None}]}


def test_compare_says_within_noise_where_the_intervals_overlap():
    lines = compare(_report(0.0205, (0.0195, 0.0260)), _report(0.0245, (0.0200, 0.0250)))
    text = "\n".join(lines)
    assert "p90 ms 0.0205 -> 0.0245 within noise" in text and "+19%" not in text
    assert "1 p90 latency within noise" in text


def test_compare_shows_a_change_beyond_the_noise_of_both_runs():
    text = "\n".join(compare(_report(0.0205, (0.0200, 0.0210)),
                             _report(0.0245, (0.0240, 0.0250))))
    assert "(+20%)" in text and "within noise" not in text


def test_compare_reads_each_run_as_noisy_as_any_engine_on_its_machine():
    """EfficientNet-Lite0 run twice here: FP32 on onnxruntime p90 8.34 ms with rounds
    6.45..8.65, then 5.72 with 5.47..6.04, while OpenVINO's FP32 baseline spread
    5.59..8.48 and 5.88..8.42 in the same runs: the machine, not the file, changed."""
    a, b = _report(8.339, (6.447, 8.654)), _report(5.722, (5.469, 6.039))
    assert "(-31%)" in "\n".join(compare(a, b))   # each engine's own spread: a change
    for run, p90, span in ((a, 8.056, [5.589, 8.475]), (b, 7.681, [5.885, 8.418])):
        run["engine_baselines"] = [{**run["benchmarks"][0], "engine": "openvino",
                                    "latency_ms": {"p90": p90, "p90_interval": span}}]
    assert "within noise" in "\n".join(compare(a, b))   # the machine's spread: not one
    b["benchmarks"][0]["latency_ms"] = {"p90": 2.5, "p90_interval": [2.4, 2.6]}
    assert "(-70%)" in "\n".join(compare(a, b))   # a real change still shows


def test_compare_with_an_older_report_without_intervals_uses_the_tie_ratio():
    near = "\n".join(compare(_report(1.00), _report(1.02, (1.01, 1.03))))
    assert "within noise" in near
    far = "\n".join(compare(_report(1.00), _report(1.10)))
    assert "(+10%)" in far and "within noise" not in far


@pytest.mark.stability
def test_three_forced_runs_of_the_quickstart_recommend_the_same_file(project):
    """The quickstart-sized digits pipeline (p90s of ~0.02 ms: as noisy as it gets), its
    default three rounds, run three times with force: the same file per target."""
    import compress
    from tests.conftest import FAST_INT8, FAST_TFLITE_INT8, pipeline_dict, write_pipeline
    stages = [{"type": "export.onnx"}, {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
              {"type": "export.tflite", "input": "source", **FAST_TFLITE_INT8},
              {"type": "benchmark", "warmup": 2, "runs": 30}]
    path = write_pipeline(project, pipeline_dict(targets=["host-cpu", "rpi4"], stages=stages))
    picks, reports = [], []
    for _ in range(3):
        report = compress.run(path, force=True, quiet=True).report
        reports.append(report)
        picks.append({r["target"]: r["artifact"] for r in report["recommendations"]})
        timed = [b for b in report["benchmarks"] if "latency_ms" in b]
        assert all(len(b["latency_ms"]["p90_rounds"]) >= 3 for b in timed)
    assert picks[0] == picks[1] == picks[2], picks
    # compare of two identical runs: every p90 within noise, no recommendation changed
    lines = compare(reports[0], reports[1])
    p90s = [line for line in lines if " p90 ms " in line]
    assert p90s and all("within noise" in line for line in p90s), "\n".join(p90s)
    changed = lines[lines.index("recommendations:") + 1:] if "recommendations:" in lines else []
    assert not [line for line in changed if " -> " in line], lines


def _state(samples_by_job: list[list[list[float]]], fleet_size: int = 1):
    from types import SimpleNamespace as NS
    jobs = [NS(artifact=NS(id=f"v{i}"), target="host-cpu", comparison=False)
            for i in range(len(samples_by_job))]
    rounds = {i: [NS(latency_samples_ms=tuple(s)) for s in job]
              for i, job in enumerate(samples_by_job)}
    ctx = NS(fleets={"host-cpu": NS(size=fleet_size)})
    return NS(jobs=jobs, rounds=rounds, ctx=ctx, todo=lambda: list(rounds))


def test_close_variants_with_a_wide_spread_get_at_most_two_more_rounds():
    wide = [[1.0] * 10, [1.6] * 10, [1.0] * 10]      # rounds' p90s 1.0..1.6: too wide
    close = [[1.1] * 10, [1.2] * 10, [1.1] * 10]
    far = [[5.0] * 10] * 3
    state, calls, notes = _state([wide, close, far]), [], []
    noise.measure_close(state, lambda at, only: calls.append((at, only)), 3, notes.append)
    assert calls == [(3, [0, 1]), (4, [0, 1])]        # the noise does not go away: bounded
    assert notes[0].startswith("timing again v0, v1 on host-cpu: ") and \
        "(extra round 1 of at most 2)" in notes[0]
    notes.clear()   # past three variant/target pairs, their count: one short line
    noise.measure_close(_state([wide, close, close, wide]), lambda *a: None, 3, notes.append)
    assert notes[0].startswith("timing again 4 variant/target pairs: ") and len(notes[0]) < 120
    calls.clear()
    noise.measure_close(_state([wide, close, far]), lambda *a: calls.append(a), 2, print)
    noise.measure_close(_state([wide, close, far], 2), lambda *a: calls.append(a), 3, print)
    noise.measure_close(_state([close, far]), lambda *a: calls.append(a), 3, print)
    assert calls == []   # fewer rounds asked for, a fleet, nothing close: none more


@pytest.mark.parametrize("kept", [["x", 1.0], [2.0, 1.0], [float("nan"), 1.0], [1.0], "1..2",
                                  None])
def test_an_edited_interval_is_read_as_the_band(kept):
    old = _report(1.00)
    old["benchmarks"][0]["latency_ms"]["p90_interval"] = kept
    assert noise.of_record(old["benchmarks"][0]["latency_ms"]) == noise.band(1.0)
    assert "within noise" in "\n".join(compare(old, _report(1.02)))


def test_compare_reads_an_interval_as_wide_as_its_engines_noise_on_the_target():
    def report(slow_p90, slow_span):
        made = _report(0.15, (0.025, 0.16), artifact="baseline-tflite")   # swung by process
        made["benchmarks"].append({**made["benchmarks"][0], "artifact": "03-export.tflite",
                                   "latency_ms": {"p90": slow_p90, "p90_interval": slow_span}})
        for bench in made["benchmarks"]:
            bench["engine"] = "litert"
        return made
    # every round of 03 slow in A, fast in B: the engine swung that much in both runs
    text = "\n".join(compare(report(0.17, [0.155, 0.18]), report(0.064, [0.042, 0.077])))
    assert "03-export.tflite: p90 ms 0.17 -> 0.064 within noise" in text
    assert "2 p90 latencies within noise" in text


def test_compare_survives_edited_engine_and_machine_fields():
    old, new = _report(1.0, (0.9, 1.1)), _report(1.05, (0.95, 1.15))
    old["benchmarks"][0].update(engine=["x"], measured_on="here", runtime={"threads": [2]})
    new["benchmarks"][0].update(measured_on={"hostname": {"a": 1}})
    assert "within noise" in "\n".join(compare(old, new))


def test_the_engines_swing_on_another_target_timed_by_the_same_machine_counts():
    swung_there = _variant("baseline-tflite", 0.15, 0.10, span=(0.025, 0.16), engine="litert",
                           precision="fp32", target="rpi4")    # rpi4 timed off the device
    all_slow = _variant("03-export.tflite", 0.17, 0.03, span=(0.155, 0.18), engine="litert")
    steady = _variant("02-quantize", 0.06, 0.04, span=(0.055, 0.065))
    rec = decide.recommend("host-cpu", [swung_there, all_slow, steady])
    assert rec["artifact"] == "03-export.tflite"
    elsewhere = Variant(**{**swung_there.__dict__, "machine": "a-real-rpi4"})
    assert decide.recommend("host-cpu", [elsewhere, all_slow, steady])["artifact"] == "02-quantize"
