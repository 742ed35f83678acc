"""Bias correction must shrink the per-channel mean error it targets, layer by layer."""
import shutil

import numpy as np
import pytest
import onnx

import compress
from compress.quant.passes.sequential_correction.onnx import _channel_means, _correctable_layers, correct_biases
from tests.conftest import pipeline_dict, write_pipeline


def _int8_static(project, **settings):
    """The project's CNN exported, then int8-static with 16 feeds for the float pass and
    `settings`: the run's result."""
    quantize = {"type": "quantize", "scheme": "int8-static", "bias_correction_samples": 16,
                **settings}
    return compress.run(write_pipeline(project, pipeline_dict(
        stages=[{"type": "export.onnx"}, quantize], targets=[])))


def test_correction_moves_quantized_layer_means_onto_the_float_ones(project, tmp_path):
    stages = [{"type": "export.onnx"},
              {"type": "quantize", "scheme": "int8-static", "preprocess": False,
               "bias_correction": False, "samples": 128}]
    result = compress.run(write_pipeline(project, pipeline_dict(stages=stages, targets=[])))
    float_path = result.run_dir / result.artifacts[1].path
    quantized_path = tmp_path / "int8.onnx"
    shutil.copy(result.run_dir / result.artifacts[2].path, quantized_path)

    from compress.errors import DataError
    from compress.core.imports import import_callable
    images = import_callable("data:calibration", project, DataError, "data")()["image"]
    feeds = [{"image": images[i:i + 1]} for i in range(0, 128, 2)]
    float_model = onnx.load(str(float_path))
    float_out = {n.name: n.output[0] for n in float_model.graph.node}

    def mean_errors(path):
        quantized = onnx.load(str(path))
        layers = _correctable_layers(quantized)
        got = _channel_means(quantized, [l[1] for l in layers], feeds, threads=2)
        want = _channel_means(float_model, [float_out[l[0]] for l in layers], feeds, threads=2)
        return [float(np.abs(g - w).mean()) for g, w in zip(got, want)]

    before = mean_errors(quantized_path)
    summary = correct_biases(float_path, quantized_path, feeds, threads=2)
    after = mean_errors(quantized_path)
    assert summary["layers_corrected"] == len(before) == 4  # 3 Conv + the classifier Gemm
    assert sum(after) < 0.5 * sum(before)
    assert all(a <= b + 1e-3 for a, b in zip(after, before))


@pytest.mark.parametrize("asked, method, count", [
    (True, "fast", "feeds"), ("sequential", "sequential", "samples"), (None, "fast", "feeds")])
def test_quantize_stage_reports_the_correction(project, asked, method, count):
    result = _int8_static(project, **({"bias_correction": asked} if asked is not None else {}))
    meta = result.artifacts[-1].meta["bias_correction"]
    assert meta["method"] == method and meta["layers_corrected"] == 4 and meta[count] == 16
    if asked is None:  # the default: the best candidate on the calibration feeds, recorded
        scores = meta["calibration_sqnr_db"]
        # the rounded model is corrected only where the correction beat the unrounded one
        rounded = "gptq+bias" if scores["bias"] >= scores["as quantized"] else "gptq"
        assert set(scores) == {"as quantized", "bias", rounded}
        assert scores[meta["kept"]] == max(scores.values())
        assert meta["weight_rounding"] == "gptq" and meta["layers_rounded"] == 4


def _weights(serialized: bytes) -> dict:
    """The int8 weight integers of a QDQ model (its int32 biases left out)."""
    from onnx import numpy_helper
    model = onnx.load_model_from_string(serialized)
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer
            if i.data_type == onnx.TensorProto.INT8}


def test_the_check_scores_each_candidate_as_built_and_writes_the_kept_one(project, monkeypatch):
    """GPTQ rounds in a second thread while the candidates without it are scored: those
    keep quantize_static's integers, the rounded ones do not, and the file written is
    the kept candidate."""
    from compress.quant.passes import onnx_backend as int8_steps
    seen, real = {}, int8_steps._scores

    def scores(candidates, *rest):
        seen.update(candidates)
        return real(candidates, *rest)
    monkeypatch.setattr(int8_steps, "_scores", scores)
    result = _int8_static(project)
    meta = result.artifacts[-1].meta["bias_correction"]
    weights = {name: _weights(model) for name, model in seen.items()}
    nearest = weights["as quantized"]
    assert all(np.array_equal(nearest[k], v) for k, v in weights["bias"].items())
    rounded = next(name for name in weights if name.startswith("gptq"))
    assert any(not np.array_equal(nearest[k], v) for k, v in weights[rounded].items())
    written = onnx.load(str(result.run_dir / result.artifacts[-1].path))
    assert written.SerializeToString() == seen[meta["kept"]]


def test_sequential_correction_with_nearest_rounding_makes_no_float_pass(project, monkeypatch):
    """The one float pass serves GPTQ and the fast correction; the sequential correction
    measures for itself, so with nearest rounding the pass is not made at all."""
    from compress.quant import float_pass
    passes = []
    for name in ("layer_pass", "calibrating_pass"):
        real = getattr(float_pass, name)
        monkeypatch.setattr(float_pass, name,
                            lambda *a, real=real, **k: passes.append(1) or real(*a, **k))
    result = _int8_static(project, bias_correction="sequential", weight_rounding="nearest")
    meta = result.artifacts[-1].meta["bias_correction"]
    assert meta["method"] == "sequential" and meta["weight_rounding"] == "nearest"
    assert meta["layers_corrected"] == 4 and passes == []


@pytest.mark.parametrize("unrounded, rounded", [
    ({"as quantized": 20.0, "bias": 21.0}, "gptq+bias"),
    ({"as quantized": 21.0, "bias": 20.0}, "gptq")])
def test_the_rounded_model_is_corrected_only_where_the_correction_won(
        project, monkeypatch, unrounded, rounded):
    """The check scores the rounded model once: with the bias correction where it beat
    the unrounded model as quantized, without it where it lost."""
    from compress.quant.passes import onnx_backend as int8_steps
    scored = []

    def scores(candidates, *rest):
        scored.extend(candidates)
        return {name: unrounded.get(name, 30.0) for name in candidates}
    monkeypatch.setattr(int8_steps, "_scores", scores)
    result = _int8_static(project)
    meta = result.artifacts[-1].meta["bias_correction"]
    assert scored == ["as quantized", "bias", rounded] and meta["kept"] == rounded


@pytest.mark.parametrize("rounded_score, kept", [(27.3, "as quantized"), (27.6, "gptq")])
def test_a_fitted_candidate_must_win_the_check_by_the_margin(
        project, monkeypatch, rounded_score, kept):
    """Rounding and correction are fitted on the feeds the check scores them on: the
    model as quantized stays unless one of them beats it by more than FIT_MARGIN_DB."""
    from compress.quant.passes import onnx_backend as int8_steps
    made_up = {"as quantized": 27.0, "bias": 19.7}
    monkeypatch.setattr(int8_steps, "_scores", lambda candidates, *rest: {
        name: made_up.get(name, rounded_score) for name in candidates})
    assert int8_steps.FIT_MARGIN_DB == 0.5
    result = _int8_static(project)
    assert result.artifacts[-1].meta["bias_correction"]["kept"] == kept


@pytest.mark.parametrize("correction, beside_the_check", [(None, True), (True, False)])
def test_numpy_works_beside_onnxruntime_on_one_blas_thread(
        project, monkeypatch, correction, beside_the_check):
    """The float pass runs numpy beside onnxruntime's own threads, and so does GPTQ
    beside the default's check: BLAS is held to one thread while they do. GPTQ on its
    own (a correction asked for, no check) keeps BLAS's threads, given back after."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from compress.quant import float_pass
    from compress.quant.passes.gptq_rounding import onnx as rounding

    def blas_threads() -> list[int]:
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    during = {}

    def recorded(module, name):
        real = getattr(module, name)

        def call(*args, **kwargs):
            during.setdefault(name, blas_threads())
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, call)
    recorded(float_pass, "calibrating_pass")
    recorded(float_pass, "layer_pass")
    recorded(float_pass.Calibrated, "layer_pass")  # the pass after the calibrating run
    recorded(rounding, "round_weights")
    # two BLAS threads to tell apart from one, also where the test workers hold BLAS to one
    with threadpool_limits(2, user_api="blas"):
        before = blas_threads()
        if max(before, default=1) < 2:
            pytest.skip("BLAS runs one thread here already: nothing to tell apart")
        _int8_static(project, **({"bias_correction": correction} if correction is not None else {}))
        assert all(n == 1 for n in during["calibrating_pass"] + during["layer_pass"])
        assert during["round_weights"] == ([1] * len(before) if beside_the_check else before)
        assert blas_threads() == before
