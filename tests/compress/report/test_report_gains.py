"""Who each speed-up is against (compress.report.gains): onnxruntime FP32, and FP32 on the
variant's own engine, on the same target. Records shaped as the benchmark stage writes
them, with only the fields the ratios read."""
import pytest

from compress.report.gains import gains, speedup_text


def _run(artifact, fmt, engine, p50, *, target="host", baseline=False, comparison=False,
         size=100, memory=50.0):
    return {"artifact": artifact, "format": fmt, "engine": engine, "target": target,
            "baseline": baseline, "comparison": comparison, "latency_ms": {"p50": p50},
            "size_bytes": size, "peak_memory_mb": memory}


BASELINES = [_run("base-onnx", "onnx", "onnxruntime", 4.0, baseline=True, size=400),
             _run("base-tflite", "tflite", "litert", 5.0, baseline=True, size=420, memory=40.0)]
OV_FP32 = _run("base-onnx", "onnx", "openvino", 3.0, baseline=True, comparison=True, size=400)


@pytest.mark.parametrize("variant, reference, same", [
    # ONNX INT8 that the probe put on OpenVINO: its own engine's FP32 is faster than ORT's
    (_run("int8", "onnx", "openvino", 1.5), ("base-onnx", "onnxruntime", 4.0 / 1.5),
     ("base-onnx", "openvino", 3.0 / 1.5)),
    # an OpenVINO IR file: FP32 on the same engine, in the format OpenVINO also reads
    (_run("ir-int8", "openvino", "openvino", 1.2), ("base-onnx", "onnxruntime", 4.0 / 1.2),
     ("base-onnx", "openvino", 3.0 / 1.2)),
    # TFLite int8 on LiteRT: against onnxruntime, and against TFLite FP32 on LiteRT
    (_run("tfl-int8", "tflite", "litert", 2.5), ("base-onnx", "onnxruntime", 4.0 / 2.5),
     ("base-tflite", "litert", 5.0 / 2.5)),
    (_run("ort-int8", "onnx", "onnxruntime", 2.0), ("base-onnx", "onnxruntime", 2.0),
     ("base-onnx", "onnxruntime", 2.0)),
])
def test_each_variant_against_onnxruntime_and_its_own_engine(variant, reference, same):
    [row] = gains([*BASELINES, variant], [OV_FP32])
    assert (row["baseline"], row["engine"]) == reference[:2]
    assert row["speedup_p50"] == pytest.approx(reference[2])
    assert (row["same_engine"]["baseline"], row["same_engine"]["engine"]) == same[:2]
    assert row["same_engine"]["speedup_p50"] == pytest.approx(same[2])


def test_size_and_memory_are_against_the_same_engines_baseline():
    [row] = gains([*BASELINES, _run("tfl-int8", "tflite", "litert", 2.5, size=105,
                                    memory=20.0)])
    assert row["size_ratio"] == pytest.approx(105 / 420)
    assert row["peak_memory_ratio"] == pytest.approx(20.0 / 40.0)


def test_a_target_without_onnxruntime_is_compared_with_its_own_baseline():
    board = [_run("base-tflite", "tflite", "litert", 50.0, target="pi", baseline=True),
             _run("int8", "tflite", "litert", 20.0, target="pi")]
    [row] = gains([*BASELINES, *board])
    assert (row["target"], row["baseline"], row["engine"]) == ("pi", "base-tflite", "litert")
    assert row["speedup_p50"] == pytest.approx(2.5) == row["same_engine"]["speedup_p50"]
    assert speedup_text(row) == "2.50x vs base-tflite on litert"   # said once


def test_an_engine_with_no_fp32_run_there_has_no_same_engine_ratio():
    unmeasured = {"artifact": "base-onnx", "target": "host", "baseline": True,
                  "comparison": True, "engine": "openvino", "unmeasured": "not installed"}
    [row] = gains([*BASELINES, _run("int8", "onnx", "openvino", 1.5)], [unmeasured])
    assert row["same_engine"] is None and row["speedup_p50"] == pytest.approx(4.0 / 1.5)
    assert speedup_text(row) == "2.67x vs base-onnx on onnxruntime"
    assert row["size_ratio"] == pytest.approx(100 / 400)      # then against the reference


def test_both_speedups_are_said_when_they_differ():
    [row] = gains([*BASELINES, _run("int8", "onnx", "openvino", 1.5)], [OV_FP32])
    assert speedup_text(row) == ("2.67x vs base-onnx on onnxruntime; "
                                 "2.00x vs base-onnx on openvino")


def test_a_target_whose_own_baseline_went_unmeasured_is_compared_with_what_was_measured():
    """The target's own baseline on an accelerator that is not there (unmeasured, so not
    among the benchmarks), its comparison run on OpenVINO measured."""
    [row] = gains([_run("tfl", "tflite", "litert", 2.0)], [OV_FP32])
    assert (row["baseline"], row["engine"]) == ("base-onnx", "openvino")
    assert row["speedup_p50"] == pytest.approx(1.5) and row["same_engine"] is None
