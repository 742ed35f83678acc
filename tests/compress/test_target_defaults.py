"""What the target profiles decide: which engine measures which artifact for which
target, and the TFLite mode an export.tflite stage without one gets."""
from types import SimpleNamespace

import pytest

from compress.config import parse_pipeline
from compress.errors import ConfigError
from compress.checks import apply_target_defaults
from compress.stages.benchmark import plan_jobs
from profiles import load_profile
from tests.conftest import pipeline_dict

TARGETS = [(name, load_profile(name)) for name in ("host-cpu", "rpi4", "jetson-orin-nano")]


def _artifact(name: str, fmt: str):
    return SimpleNamespace(id=name, format=fmt)


def test_each_target_gets_the_formats_its_engines_run():
    candidates = [(_artifact("onnx-fp32", "onnx"), True), (_artifact("tflite-int8", "tflite"), False)]
    cores = {name: 2 for name, _ in TARGETS}  # the measuring machine's, per target
    jobs, skipped = plan_jobs(candidates, TARGETS, cores)
    measured = {(j.artifact.id, j.target) for j in jobs}
    assert measured == {("onnx-fp32", "host-cpu"), ("tflite-int8", "host-cpu"),
                        ("tflite-int8", "rpi4"), ("onnx-fp32", "jetson-orin-nano")}
    assert {(s["artifact"], s["target"]) for s in skipped} == {
        ("onnx-fp32", "rpi4"), ("tflite-int8", "jetson-orin-nano")}
    rpi4 = next(j for j in jobs if j.target == "rpi4")
    assert rpi4.threads == 2 and rpi4.xnnpack  # 4 in the profile, capped at this host's cores


def _tflite_pipeline(**stage):
    return parse_pipeline(pipeline_dict(stages=[{"type": "export.tflite", **stage}]))


def test_a_tflite_stage_without_mode_takes_the_targets_mode():
    resolved = apply_target_defaults(_tflite_pipeline(), TARGETS)
    assert resolved.stages[0].mode == "int8"  # rpi4 asks for it, the others do not care
    assert apply_target_defaults(_tflite_pipeline(), TARGETS[:1]).stages[0].mode == "fp32"


def test_a_mode_set_in_the_pipeline_wins():
    assert apply_target_defaults(_tflite_pipeline(mode="fp16"), TARGETS).stages[0].mode == "fp16"


def test_a_profile_mode_that_contradicts_the_stage_is_an_error():
    with pytest.raises(ConfigError, match="stages.0: mode int8 .asked for by rpi4.: mode int8 quantizes the inputs"):
        apply_target_defaults(_tflite_pipeline(io="float"), TARGETS)


def test_a_profile_delegate_and_its_options_reach_the_runner(tmp_path):
    from compress.stages.benchmark import Benchmark, _runner_args
    path = tmp_path / "litert-gpu.yaml"
    path.write_text("name: litert-gpu\ndevice: {arch: any}\nruntime:\n  delegate: gpu\n"
                    "  delegate_options: {enforce_f32: true, benchmark_mode: false}\n")
    targets = [("litert-gpu", load_profile(str(path)))]
    candidates = [(_artifact("onnx", "onnx"), True), (_artifact("tflite", "tflite"), False)]
    jobs, _ = plan_jobs(candidates, targets, {"litert-gpu": 2})
    onnx, tflite = sorted(jobs, key=lambda j: j.artifact.id)
    assert onnx.delegate is None and onnx.delegate_options == ()   # LiteRT's only
    args = _runner_args("m.tflite", None, None, tflite, Benchmark(type="benchmark"), None)
    assert args[args.index("--delegate") + 1] == "gpu"
    options = [args[i + 1] for i, a in enumerate(args) if a == "--delegate-option"]
    assert options == ["enforce_f32=1", "benchmark_mode=0"]
    assert "--placement" in args
