"""The rules that pick what to ship (compress.report.decide): feasibility, ranking, ties, the
closest miss and the Pareto front, on verdicts as profiles.check writes them."""
from compress.measure.noise import TIE_RATIO
from compress.report import decide
from compress.report.decide import Variant


def _verdicts(artifact, target, **values_and_limits):
    rows = []
    for key, (value, limit, status) in values_and_limits.items():
        rows.append({"artifact": artifact, "target": target, "metric": key, "budget": limit,
                     "value": value, "status": status, "reason": ""})
    return tuple(rows)


def _variant(name, p90, size, drop=0.0, target="rpi4", status="pass", latency_limit=10.0):
    late = "fail" if p90 > latency_limit else status
    verdicts = _verdicts(name, target, latency_p90_ms=(p90, latency_limit, late),
                         model_size_mb=(size, 8.0, "fail" if size > 8 else "pass"),
                         accuracy_drop=(drop, 0.01, "fail" if drop > 0.01 else status))
    return Variant(name, target, False, size, verdicts, p90, 30.0,
                   {"name": "accuracy", "value": 0.9 - drop}, drop, "litert",
                   {"path": f"/runs/x/{name}/model.tflite", "format": "tflite",
                    "precision": "int8"})


def test_the_fastest_feasible_variant_wins_and_a_faster_one_over_budget_does_not():
    fast_but_big = _variant("big", 2.0, 9.0)
    slow = _variant("slow", 6.0, 3.0)
    fast = _variant("fast", 4.0, 4.0)
    rec = decide.recommend("rpi4", [fast_but_big, slow, fast])
    assert rec["artifact"] == "fast" and rec["status"] == decide.SHIP
    assert rec["latency_p90_ms"] == 4.0 and "next: slow" in rec["why"]


def test_a_tie_within_the_noise_goes_to_the_smaller_file_then_the_smaller_drop():
    a = _variant("a", 4.00, 5.0, drop=0.001)
    b = _variant("b", 4.05, 3.0, drop=0.004)       # 1.25 % slower: a tie
    c = _variant("c", 4.05, 3.0, drop=0.002)
    assert decide.recommend("rpi4", [a, b, c])["artifact"] == "c"
    d = _variant("d", 4.0 * (1 + TIE_RATIO) * 1.01, 1.0)   # just past the tie
    assert decide.recommend("rpi4", [a, d])["artifact"] == "a"


def test_off_the_device_the_winner_is_a_candidate_not_a_pass():
    off = _variant("v", 3.0, 2.0, status="off-target")
    rec = decide.recommend("rpi4", [off])
    assert rec["status"] == decide.CANDIDATE
    assert "candidate" in decide.summary(rec, {"latency_p90_ms": 10.0})


def test_nothing_fits_names_the_closest_miss_and_by_how_much():
    over_20 = _variant("slowish", 12.0, 3.0)     # 20 % over the 10 ms budget
    over_90 = _variant("slower", 19.0, 3.0)
    rec = decide.recommend("rpi4", [over_90, over_20])
    assert rec["status"] == decide.NOTHING_FITS and rec["artifact"] is None
    miss = rec["closest_miss"]
    assert miss["artifact"] == "slowish"
    assert miss["misses"][0]["budget"] == "latency_p90_ms"
    assert abs(miss["misses"][0]["over_by"] - 2.0) < 1e-9
    assert abs(miss["misses"][0]["over_by_ratio"] - 0.2) < 1e-9
    assert "slowish" in decide.summary(rec, {}) and "20%" in decide.summary(rec, {})


def test_a_target_with_no_variant_is_not_judged_not_a_miss():
    rec = decide.recommend("rpi5", [_variant("a", 1.0, 1.0)])
    assert rec["status"] == decide.UNJUDGED and rec["closest_miss"] is None


def test_the_pareto_front_keeps_what_nothing_beats_on_every_axis():
    fast_lossy = _variant("fast_lossy", 2.0, 3.0, drop=0.009)
    slow_exact = _variant("slow_exact", 6.0, 3.0, drop=0.0)
    dominated = _variant("dominated", 6.5, 3.5, drop=0.009)
    small = _variant("small", 7.0, 1.0, drop=0.009)
    front = decide.pareto_front([fast_lossy, slow_exact, dominated, small])
    assert sorted(front) == ["fast_lossy", "slow_exact", "small"]


def test_the_summary_says_how_to_feed_the_file():
    rec = decide.recommend("rpi4", [_variant("q", 4.1, 3.9, drop=0.004)])
    rec["feeding"] = {"name": "x", "layout": "NHWC", "dtype": "int8", "shape": [1, 8, 8, 1],
                      "scale": 0.0098, "zero_point": -51}
    text = decide.summary(rec, {"latency_p90_ms": 100, "model_size_mb": 10,
                                "accuracy_drop": 0.01})
    assert text.startswith("rpi4: ship /runs/x/q/model.tflite (tflite int8, NHWC int8 input")
    assert "scale 0.0098 zero point -51" in text and "p90 4.1 of 100 ms" in text
    assert "drop 0.004 of 0.01" in text and text.endswith("measured on the device")


def test_a_zero_budget_is_missed_by_any_excess_without_dividing_by_it():
    lossy = _variant("lossy", 2.0, 3.0, drop=0.02)
    rows = tuple({**v, "budget": 0.0, "status": "fail"} if v["metric"] == "accuracy_drop"
                 else v for v in lossy.verdicts)
    import dataclasses
    rec = decide.recommend("rpi4", [dataclasses.replace(lossy, verdicts=rows)])
    (miss,) = rec["closest_miss"]["misses"]
    assert miss["over_by_ratio"] is None and abs(miss["over_by"] - 0.02) < 1e-12
    assert "over 0 by 0.02" in decide.summary(rec, {})
    assert decide.over_ratio(0.0, 0.0) == 0.0
