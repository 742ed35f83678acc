import time

import numpy as np
import pytest

from runtimes import FunctionSession, TensorSpec, Timing, measure
from runtimes.measure import summarize_latencies
from runtimes.metrics import Scoring, accuracy, evaluate, fidelity


def _session(delay_s: float = 0.0):
    def fn(x):
        if delay_s:
            time.sleep(delay_s)
        return [x * 2]
    return FunctionSession(fn, [TensorSpec("x", (4, 3), "float32")])


def test_measure_counts_runs_and_reports_percentiles():
    ticks = []
    result = measure(_session(), {"x": np.ones((4, 3), np.float32)}, Timing(warmup=3, runs=25),
                     on_progress=lambda done, total: ticks.append(done))
    assert result["runs"] == 25 and ticks[-1] == 25
    lat = result["latency_ms"]
    assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert result["batch_size"] == 4
    assert result["throughput_per_s"] > 0
    assert result["peak_rss_mb"] > 10
    assert result["energy"] is None


def test_measure_keeps_running_until_min_seconds():
    result = measure(_session(0.002), {"x": np.ones((4, 3), np.float32)},
                     Timing(warmup=0, runs=1, min_seconds=0.1))
    assert result["runs"] > 10  # 0.1 s of ~2 ms runs


def test_measure_reports_energy_per_inference_from_a_meter():
    class Meter:  # 4 W above idle; its own window is longer than the timed one
        def start(self):
            pass

        def stop(self):
            return {"joules": 99.0, "active_w": 4.0, "window_s": 99.0}

    result = measure(_session(0.002), {"x": np.ones((4, 3), np.float32)},
                     Timing(warmup=0, runs=10), meter=Meter())
    # energy over the timed window only: 4 W x window / (10 runs x batch 4)
    window = result["window_s"]
    assert result["energy"]["window_s"] == window and window < 1
    assert result["energy"]["mj_per_inference"] == pytest.approx(4.0 * window * 1000 / 40)


def test_summary_statistics_match_numpy():
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    stats = summarize_latencies(values)
    assert stats["p50"] == 3.0 and stats["mean"] == 3.0
    assert stats["p90"] == pytest.approx(np.percentile(values, 90))
    assert stats["std"] == pytest.approx(np.std(values))


def test_accuracy_and_fidelity():
    logits = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    assert accuracy(logits, np.array([1, 0, 0])) == pytest.approx(2 / 3)
    same = fidelity(logits, logits)
    assert same["top1_agreement"] == 1.0 and same["cosine"] == pytest.approx(1.0)
    assert same["max_abs_error"] == 0.0
    flipped = fidelity(logits[:, ::-1], logits)
    assert flipped["top1_agreement"] == 0.0 and flipped["cosine"] < 1.0
    assert evaluate(logits, metric="fidelity", reference=logits,
                    scoring=Scoring("cosine"))["name"] == "cosine"
