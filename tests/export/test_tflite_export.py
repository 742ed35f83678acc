"""export.tflite on the trained digits CNN: every mode, NHWC, the int8 promise, errors."""

import pytest

import compress
from compress.config.pipeline import parse_pipeline
from compress.errors import ConfigError
from tests.conftest import (FAST_TFLITE_INT8, assert_only_finished_stages, pipeline_dict,
                            run_cli, write_pipeline)

pytest.importorskip("litert_torch", reason="litert-torch is not installed")


@pytest.fixture(scope="module")
def exported(tmp_path_factory, digits_checkpoint):
    from tests.conftest import fill_project
    folder = fill_project(tmp_path_factory.mktemp("tflite"), digits_checkpoint)
    stages = [{"type": "export.tflite", "name": "fp32", "input": "source"},
              {"type": "export.tflite", "name": "fp16", "input": "source", "mode": "fp16"},
              {"type": "export.tflite", "name": "dyn", "input": "source", "mode": "dynamic-int8"},
              {"type": "export.tflite", "name": "int8", "input": "source", "mode": "int8",
               "samples": 128},
              # the layout is its subject: the fast int8 setting (the "int8" one has the
              # refinements, their check is tested on it)
              {"type": "export.tflite", "name": "nhwc", "input": "source", "mode": "int8",
               "channels_last": True, "samples": 128, **FAST_TFLITE_INT8},
              {"type": "benchmark", "warmup": 2, "runs": 6, "rounds": 1}]
    return compress.run(write_pipeline(folder, pipeline_dict(stages=stages)))


def test_every_mode_converts_and_keeps_accuracy(exported):
    artifacts = {a.id: a for a in exported.artifacts}
    assert {artifacts[n].precision for n in ("fp32", "fp16", "dyn", "int8")} == \
        {"fp32", "fp16", "int8-dynamic", "int8"}
    assert artifacts["fp32"].meta["parity"]["worst"]["max_abs_error"] < 1e-4
    assert artifacts["int8"].size_bytes < 0.4 * artifacts["fp32"].size_bytes
    for bench in exported.benchmarks:  # through the LiteRT runtime, torch-free
        assert bench["metric"]["value"] >= 0.97, bench["artifact"]
    assert {b["runtime"]["engine"] for b in exported.benchmarks if not b["baseline"]} == {"litert"}


def test_int8_is_int8_through_and_records_io_quantization(exported):
    for name in ("int8", "nhwc"):
        tensors = next(a for a in exported.artifacts if a.id == name).meta["tensors"]
        assert tensors["float32_tensors"] == []
        io = tensors["io"]
        assert all(t["dtype"] == "int8" and t["scale"] > 0 for t in io)
    nhwc = next(a for a in exported.artifacts if a.id == "nhwc").meta["tensors"]["io"][0]
    assert nhwc["shape"] == [1, 8, 8, 1]


def test_int8_keeps_the_candidate_closest_to_the_float_model(exported):
    """Both range estimators x (as quantized, corrected, GPTQ-rounded, both): the one with
    the highest SQNR on the calibration feeds is the file written."""
    meta = next(a for a in exported.artifacts if a.id == "int8").meta
    scores = meta["check"]["calibration_sqnr_db"]
    assert sorted(scores) == sorted(f"{r}{v}" for r in ("average", "minmax")
                                    for v in ("", "+bias", "+gptq", "+gptq+bias"))
    assert meta["check"]["kept"] == max(scores, key=scores.get)
    assert meta["ranges"] == meta["check"]["kept"].split("+")[0]
    kept = meta["check"]["kept"]   # the rounding done to the file kept, not another candidate
    assert meta["weight_rounding"]["layers_rounded"] == (4 if "+gptq" in kept else 0)
    assert (meta["bias_correction"]["layers_corrected"] > 0) == ("+bias" in kept)


def test_io_must_fit_the_mode():
    stage = {"type": "export.tflite", "mode": "int8", "io": "float"}
    with pytest.raises(ConfigError, match="no float-I/O option"):
        parse_pipeline(pipeline_dict(stages=[stage]))
    with pytest.raises(ConfigError, match="io: int8 needs mode int8"):
        parse_pipeline(pipeline_dict(stages=[{"type": "export.tflite", "io": "int8"}]))


@pytest.mark.runs  # bad input as a CLI run, as tests/compress/runner/test_bad_input.py
def test_an_operator_without_lowering_is_named(project):
    (project / "special.py").write_text(
        "import torch\n"
        "class Special(torch.nn.Module):\n"
        "    def forward(self, image):\n"
        "        return torch.special.erfinv(image.clamp(-0.9, 0.9)).flatten(1)[:, :10]\n"
        "def build():\n    return Special()\n")
    data = pipeline_dict(stages=[{"type": "export.tflite"}], targets=[])
    data["model"]["torch"] = {"factory": "special:build"}
    child = run_cli("run", write_pipeline(project, data), "--quiet", cwd=project)
    assert child.returncode == 2 and "Traceback" not in child.stderr
    assert "no lowering for operator aten.erfinv" in child.stderr
    assert_only_finished_stages(project / "runs", ["00-source"])


def test_int8_without_calibration_data_is_refused_before_running(project):
    data = pipeline_dict(stages=[{"type": "export.tflite", "mode": "int8"}], targets=[])
    data["data"] = {"evaluation": "data:evaluation"}
    child = run_cli("run", write_pipeline(project, data), "--quiet", cwd=project)
    assert child.returncode == 2 and "needs data.calibration" in child.stderr
