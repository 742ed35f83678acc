"""What the target profiles decide: which engine measures which artifact for which
target, and the TFLite mode an export.tflite stage without one gets."""
from types import SimpleNamespace

import pytest

from compress.config.pipeline import parse_pipeline
from compress.errors import ConfigError
from compress.runner.targets import apply_target_defaults
from compress.stages.benchmark import plan_jobs
from profiles import load_profile
from tests.conftest import pipeline_dict

TARGETS = [(name, load_profile(name)) for name in ("host-cpu", "rpi4", "jetson-orin-nano")]


def _artifact(name: str, fmt: str):
    return SimpleNamespace(id=name, format=fmt, meta={})


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
    assert rpi4.threads == 2 and rpi4.engine == "litert" and rpi4.settings.xnnpack  # 4 in the
    # profile, capped at this host's cores


def _tflite_pipeline(**stage):
    return parse_pipeline(pipeline_dict(stages=[{"type": "export.tflite", **stage}]))


def test_a_tflite_stage_without_mode_takes_the_targets_mode():
    resolved = apply_target_defaults(_tflite_pipeline(), TARGETS)
    assert resolved.stages[0].mode == "int8"  # rpi4 asks for it, the others do not care
    assert apply_target_defaults(_tflite_pipeline(), TARGETS[:1]).stages[0].mode == "fp32"


def test_a_mode_set_in_the_pipeline_wins():
    assert apply_target_defaults(_tflite_pipeline(mode="fp16"), TARGETS).stages[0].mode == "fp16"


def test_a_profile_mode_that_contradicts_the_stage_is_an_error():
    with pytest.raises(ConfigError, match=r"stages\[1\] \(export.tflite\): mode int8 .asked for by rpi4.: mode int8 quantizes the inputs"):
        apply_target_defaults(_tflite_pipeline(io="float"), TARGETS)


def test_a_profile_delegate_and_its_options_reach_the_runner(tmp_path):
    from compress.measure.workloads import Prepared, RunnerPaths, latency_args
    from compress.stages.benchmark import Benchmark
    path = tmp_path / "litert-gpu.yaml"
    path.write_text("name: litert-gpu\ndevice: {arch: any}\nruntime:\n  delegate: gpu\n"
                    "  delegate_options: {enforce_f32: true, benchmark_mode: false}\n")
    targets = [("litert-gpu", load_profile(str(path)))]
    candidates = [(_artifact("onnx", "onnx"), True), (_artifact("tflite", "tflite"), False)]
    jobs, _ = plan_jobs(candidates, targets, {"litert-gpu": 2})
    onnx, tflite = sorted((j for j in jobs if not j.comparison), key=lambda j: j.artifact.id)
    onnx_args = latency_args(RunnerPaths("m.onnx"), onnx, Benchmark(type="benchmark"), Prepared())
    assert "--delegate" not in onnx_args and "--delegate-option" not in onnx_args  # LiteRT's
    args = latency_args(RunnerPaths("m.tflite"), tflite, Benchmark(type="benchmark"), Prepared())
    assert args[args.index("--delegate") + 1] == "gpu"
    options = [args[i + 1] for i, a in enumerate(args) if a == "--delegate-option"]
    assert options == ["enforce_f32=1", "benchmark_mode=0"]
    assert "--placement" in args


def _profile(tmp_path, engines: str):
    path = tmp_path / "board.yaml"
    path.write_text(f"name: board\ndevice: {{arch: any}}\nruntime:\n  engines: {engines}\n")
    return [("board", load_profile(str(path)))]


def test_the_first_listed_engine_that_runs_a_format_measures_it(tmp_path):
    from compress.measure.workloads import Prepared, RunnerPaths, latency_args
    from compress.stages.benchmark import Benchmark
    candidates = [(_artifact("onnx", "onnx"), True), (_artifact("tflite", "tflite"), False)]
    jobs, skipped = plan_jobs(candidates, _profile(tmp_path, "[openvino, onnxruntime]"),
                              {"board": 2})
    # the baseline on the first listed engine, and on onnxruntime for comparison
    assert [(j.artifact.id, j.engine, j.comparison) for j in jobs] == [
        ("onnx", "openvino", False), ("onnx", "onnxruntime", True)]
    assert skipped[0]["reason"].endswith("(runtime.engines in its profile): no tflite files")
    args = latency_args(RunnerPaths("m.onnx"), jobs[0], Benchmark(type="benchmark"), Prepared())
    assert args[args.index("--engine") + 1] == "openvino" and "--precision" not in args


def test_engines_auto_lets_the_runner_choose_and_an_artifact_names_its_precision(tmp_path):
    from compress.measure.workloads import Prepared, RunnerPaths, latency_args
    from compress.stages.benchmark import Benchmark
    bf16 = SimpleNamespace(id="bf16", format="onnx", meta={"inference_precision": "bf16"})
    candidates = [(_artifact("onnx", "onnx"), True), (bf16, False),
                  (_artifact("tflite", "tflite"), False)]
    jobs, skipped = plan_jobs(candidates, _profile(tmp_path, "auto"), {"board": 2})
    # the baseline is measured on every engine that runs it, onnxruntime's run its record;
    # the variants on the engine the runner's probe chooses
    assert not skipped and [(j.artifact.id, j.engine, j.comparison) for j in jobs] == [
        ("onnx", "onnxruntime", False), ("onnx", "openvino", True),
        ("bf16", "auto", False), ("tflite", "auto", False)]
    jobs = jobs[2:]
    args = [latency_args(RunnerPaths("m.onnx"), job, Benchmark(type="benchmark"), Prepared())
            for job in jobs]
    assert all(a[a.index("--engine") + 1] == "auto" and "--placement" in a for a in args)
    assert args[0][args[0].index("--precision") + 1] == "bf16" and "--precision" not in args[1]


@pytest.mark.parametrize("engines, measured", [
    ("auto", {"genai": "onnxruntime-genai", "gguf": "llama.cpp", "ovgenai": "openvino-genai"}),
    ("[litert]", {"genai": "onnxruntime-genai", "gguf": "llama.cpp",
                  "ovgenai": "openvino-genai"}),     # no language-model engine named: all
    ("[litert, onnxruntime-genai, openvino-genai]",
     {"genai": "onnxruntime-genai", "ovgenai": "openvino-genai"})])
def test_every_language_model_engine_a_profile_runs_measures_its_format(tmp_path, engines,
                                                                        measured):
    """engines: auto measures a language model's variants on all three engines (each format
    has its one), so the recommendation picks among them by measurement; a profile that
    names some language-model engines measures only those, saying why for the rest."""
    candidates = [(_artifact(fmt, fmt), True) for fmt in ("genai", "gguf", "ovgenai")]
    jobs, skipped = plan_jobs(candidates, _profile(tmp_path, engines), {"board": 2})
    assert {j.artifact.id: j.engine for j in jobs} == measured
    assert [s["artifact"] for s in skipped] == sorted(set(("genai", "gguf", "ovgenai")) - set(measured))
    assert all("runtime.engines in its profile" in s["reason"] for s in skipped)
