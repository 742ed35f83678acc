"""A corpus of broken inputs: each one must end `compress run` with exit code 2, one
message that names the problem, no traceback, and nothing half-written in the run directory
(a case found by a stage keeps only the complete stages before it, for a re-run to resume).

Every case builds its broken setup inside the `project` folder (the quickstart model,
data and a trained checkpoint) and runs the CLI in a subprocess, as a user would.
Cases that only a look at the YAML (and profiles) can catch are also checked with
`compress validate`.
"""
from __future__ import annotations

import importlib.util
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
import yaml

from tests.conftest import pipeline_dict, run_cli, write_pipeline

# 54 cases, ~60 CLI runs (most import torch, 3-14 s each here): `make test-runs`. The rest of
# the corpus runs in-process in `make test`: test_bad_input_inprocess.py (the pipeline CLI)
# and test_bad_input_runner.py (`python -m runtimes bench`).
pytestmark = [pytest.mark.slow, pytest.mark.runs]

# Loaders a user could plausibly get wrong, written next to the pipeline as baddata.py.
BAD_DATA = textwrap.dedent("""\
    import numpy as np

    def wrong_shape():
        return {"image": np.zeros((10, 1, 9, 9), dtype=np.float32)}

    def boom():
        raise ValueError("the dataset server said no")

    def integers():
        return {"image": np.zeros((10, 1, 8, 8), dtype=np.int64)}

    def no_labels():
        return {"image": np.zeros((10, 1, 8, 8), dtype=np.float32)}

    def three_channels():
        return {"image": np.zeros((10, 3, 8, 8), dtype=np.float32)}
    """)


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[Path], Path]        # project folder -> path of the pipeline file
    expect: tuple                        # substrings the error message must contain; a
                                         # callable(pipeline path) -> str for computed ones
    validate: bool = False               # `compress validate` must reject it too
    during_run: bool = False             # found by a stage: the stages before it stay
    marks: tuple = field(default_factory=tuple)
    category: str = ""                   # set from CATEGORIES below (yaml, model, data, ...)


# --- builders ----------------------------------------------------------------------


def _at_line(text: str, message: str) -> Callable[[Path], str]:
    """`pipeline.yaml:N: message`, N being the line of the file that holds `text`."""
    def expected(path: Path) -> str:
        lines = path.read_text().splitlines()
        number = next(i for i, line in enumerate(lines, 1) if text in line)
        return f"{path.name}:{number}: {message}"
    return expected


def _write(project: Path, **overrides) -> Path:
    return write_pipeline(project, pipeline_dict(**overrides))


def _write_text(text: str) -> Callable[[Path], Path]:
    def build(project: Path) -> Path:
        path = project / "pipeline.yaml"
        path.write_text(text)
        return path
    return build


def _with(**overrides) -> Callable[[Path], Path]:
    return lambda project: _write(project, **overrides)


def _baddata(project: Path) -> None:
    (project / "baddata.py").write_text(BAD_DATA)


def _torch_model(**torch_overrides) -> dict:
    base = pipeline_dict()["model"]
    base["torch"].update(torch_overrides)
    return base


def _unclosed_bracket(project: Path) -> Path:
    text = yaml.safe_dump(pipeline_dict(), sort_keys=False)
    # `targets: [host-cpu`: a flow sequence that is never closed.
    text = text.replace("targets:\n- host-cpu\n", "targets: [host-cpu\n")
    assert "targets: [host-cpu\n" in text
    path = project / "pipeline.yaml"
    path.write_text(text)
    return path


def _stage_typo(project: Path) -> Path:
    data = pipeline_dict()
    data["stages"][1]["calibraton"] = "minmax"
    return write_pipeline(project, data)


def _unknown_stage_type(project: Path) -> Path:
    data = pipeline_dict()
    data["stages"].insert(1, {"type": "sparsify", "sparsity": 0.5})
    return write_pipeline(project, data)


def _runs_many(project: Path) -> Path:
    data = pipeline_dict()
    data["stages"][2]["runs"] = "many"
    return write_pipeline(project, data)


def _no_model(project: Path) -> Path:
    data = pipeline_dict()
    del data["model"]
    return write_pipeline(project, data)


def _missing_pipeline(project: Path) -> Path:
    return project / "no_such_pipeline.yaml"


def _mismatched_checkpoint(project: Path) -> Path:
    # A checkpoint of the same architecture at another width: nothing trained.
    import torch
    spec = importlib.util.spec_from_file_location("_bad_input_model", project / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.save(module.build(width=8).state_dict(), project / "narrow.pt")
    return _write(project, model=_torch_model(checkpoint="narrow.pt"))


def _corrupt_checkpoint(project: Path) -> Path:
    (project / "garbage.pt").write_bytes(bytes(range(256)) * 8)
    return _write(project, model=_torch_model(checkpoint="garbage.pt"))


def _onnx_pipeline(project: Path, onnx: str, name: str, shape: list) -> Path:
    return _write(project,
                  model={"onnx": onnx, "inputs": [{"name": name, "shape": shape}]},
                  data={}, stages=[{"type": "quantize", "scheme": "int8-dynamic"}],
                  targets=[])


def _corrupt_onnx(project: Path) -> Path:
    (project / "bad.onnx").write_bytes(b"\x08\x07\x12\x07pytorch" + bytes(range(200)))
    return _onnx_pipeline(project, "bad.onnx", "image", [1, 1, 8, 8])


def _truncated_onnx(project: Path) -> Path:
    path = _export_tiny_onnx(project, "full.onnx")
    blob = path.read_bytes()
    (project / "bad.onnx").write_bytes(blob[: len(blob) // 2])
    return _onnx_pipeline(project, "bad.onnx", "x", [1, 4])


def _export_tiny_onnx(project: Path, name: str) -> Path:
    import torch
    path = project / name
    torch.onnx.export(torch.nn.Linear(4, 3), (torch.zeros(1, 4),), str(path),
                      input_names=["x"], output_names=["y"], dynamo=False)
    return path


def _onnx_wrong_input_name(project: Path) -> Path:
    _export_tiny_onnx(project, "tiny.onnx")
    return _onnx_pipeline(project, "tiny.onnx", "features", [1, 4])


def _loader(calibration: str, evaluation: str | None = "data:evaluation", **overrides):
    def build(project: Path) -> Path:
        _baddata(project)
        data = {"calibration": calibration, "metric": {"type": "accuracy"}}
        if evaluation is not None:
            data["evaluation"] = evaluation
        return _write(project, data=data, **overrides)
    return build


def _missing_npz(project: Path) -> Path:
    return _write(project, data={"calibration": "calib.npz", "evaluation": "data:evaluation"})


def _bad_profile_file(project: Path) -> Path:
    profile = yaml.safe_load((Path(__file__).resolve().parents[3] / "profiles"
                              / "host-cpu.yaml").read_text())
    profile["name"] = "my-board"
    profile["budget"]["latency_p90_ms"] = "fast"
    (project / "my-board.yaml").write_text(yaml.safe_dump(profile))
    return _write(project, targets=["my-board.yaml"])


def _my_board(project: Path, **runtime_and_export) -> str:
    """A copy of host-cpu named my-board, with the given runtime/export settings."""
    profile = yaml.safe_load((Path(__file__).resolve().parents[3] / "profiles"
                              / "host-cpu.yaml").read_text())
    profile["name"] = "my-board"
    for section, values in runtime_and_export.items():
        profile.setdefault(section, {}).update(values)
    (project / "my-board.yaml").write_text(yaml.safe_dump(profile))
    return "my-board.yaml"


TFLITE_STAGES = [{"type": "export.tflite"}, {"type": "benchmark", "warmup": 2, "runs": 20}]


def _unknown_provider_option(project: Path) -> Path:
    board = _my_board(project, runtime={"providers": [
        {"name": "CUDAExecutionProvider", "options": {"device": 0}}]})
    return _write(project, targets=[board])


def _unknown_provider(project: Path) -> Path:
    return _write(project, targets=[_my_board(project, runtime={"providers": [
        {"name": "CudaExecutionProvider"}]})])


def _conflicting_tflite_modes(project: Path) -> Path:
    board = _my_board(project, export={"tflite_mode": "fp16"})
    return _write(project, stages=TFLITE_STAGES, targets=["rpi4", board])


def _unknown_engine(project: Path) -> Path:
    return _write(project, targets=[_my_board(project, runtime={"engines": ["tensorrt"]})])


def _int8_from_profile_without_calibration(project: Path) -> Path:
    return _write(project, stages=TFLITE_STAGES, targets=["rpi4"],
                  data={"evaluation": "data:evaluation", "metric": {"type": "accuracy"}})


def _tflite_source(project: Path, content: bytes, stages: list) -> Path:
    (project / "given.tflite").write_bytes(content)
    model = {"tflite": "given.tflite", "inputs": pipeline_dict()["model"]["inputs"]}
    return _write(project, model=model, stages=stages)


FIXTURE_INT8 = Path(__file__).resolve().parents[2] / "fixtures" / "digits_cnn_int8.tflite"


def _corrupt_tflite_source(project: Path) -> Path:
    return _tflite_source(project, FIXTURE_INT8.read_bytes()[:200], TFLITE_STAGES[1:])


def _tflite_source_with_export(project: Path) -> Path:
    return _tflite_source(project, FIXTURE_INT8.read_bytes(), [{"type": "export.onnx"}])


def _int4_on_conv_only(project: Path) -> Path:
    import torch
    path = project / "convs.onnx"
    torch.onnx.export(torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU()),
                      (torch.zeros(1, 1, 8, 8),), str(path), input_names=["image"], dynamo=False)
    return _write(project, model={"onnx": "convs.onnx", "inputs": pipeline_dict()["model"]["inputs"]},
                  stages=[{"type": "quantize", "scheme": "int4-weight-only"}], targets=[])


def _quantize_with(**settings) -> Callable[[Path], Path]:
    def build(project: Path) -> Path:
        data = pipeline_dict()
        data["stages"][1] = {"type": "quantize", **settings}
        return write_pipeline(project, data)
    return build


def _max_drop_without_evaluation(project: Path) -> Path:
    stages = [{"type": "export.onnx"},
              {"type": "quantize", "scheme": "int8-static", "max_drop": 0.01}]
    return _write(project, data={"calibration": "data:calibration"}, stages=stages, targets=[])


def _max_drop_from_targets_without_budget(project: Path) -> Path:
    board = _my_board(project, budget={"accuracy_drop": None})
    data = pipeline_dict(targets=[board])
    data["stages"][1] = {"type": "quantize", "scheme": "int8-static", "max_drop": "targets"}
    return write_pipeline(project, data)


def _no_calibration(project: Path) -> Path:
    return _write(project, data={"evaluation": "data:evaluation",
                                 "metric": {"type": "accuracy"}})


def _dynamic_on_cnn(project: Path) -> Path:
    data = pipeline_dict()
    data["stages"][1] = {"type": "quantize", "scheme": "int8-dynamic"}
    return write_pipeline(project, data)


def _unknown_input_stage(project: Path) -> Path:
    data = pipeline_dict()
    data["stages"][1]["input"] = "exported"
    return write_pipeline(project, data)


def _declared_shape(data_spec: dict | None) -> Callable[[Path], Path]:
    def build(project: Path) -> Path:
        _baddata(project)
        model = pipeline_dict()["model"]
        model["inputs"][0]["shape"] = [1, 3, 8, 8]
        overrides = {"model": model}
        if data_spec is not None:
            overrides["data"] = data_spec
        if not data_spec:  # no data at all: export.onnx traces random inputs of that shape
            overrides["stages"] = [{"type": "export.onnx"}]
            overrides["targets"] = []
        return _write(project, **overrides)
    return build


CASES = [
    # The parser notices the missing `]` at the next key, `output:`.
    Case("yaml-unclosed-bracket", _unclosed_bracket,
         (_at_line("output:", "not valid YAML: expected ',' or ']'"),), validate=True),
    Case("yaml-list-not-mapping", _write_text("- name: t\n- stages: []\n"),
         ("pipeline.yaml:1:", "must be a YAML mapping"), validate=True),
    Case("yaml-empty-file", _write_text(""), ("pipeline.yaml:1:", "must be a YAML mapping"),
         validate=True),
    Case("unknown-top-level-key", _with(optimise=True),
         (_at_line("optimise:", "optimise: unknown key"),), validate=True),
    Case("unknown-stage-key-typo", _stage_typo,
         (_at_line("calibraton:", "stages[2] (quantize).calibraton: unknown key"),),
         validate=True),
    Case("unknown-stage-type", _unknown_stage_type,
         ("stages[2].type: unknown stage type 'sparsify'", "Known stage types:", "export.onnx",
          "quantize", "benchmark", "prune", "distill"),
         validate=True),
    Case("wrong-type-runs", _runs_many,
         (_at_line("runs: many", "stages[3] (benchmark).runs: Input should be a valid integer"),),
         validate=True),
    Case("missing-model", _no_model, ("model: required key is missing",), validate=True),
    Case("pipeline-file-missing", _missing_pipeline,
         ("no_such_pipeline.yaml: file not found",), validate=True),
    Case("checkpoint-missing", _with(model=_torch_model(checkpoint="nope.pt")),
         ("model.torch.checkpoint: file not found", "nope.pt")),
    Case("checkpoint-mismatch", _mismatched_checkpoint,
         ("narrow.pt does not match the factory's model",
          "size mismatch for features.0.weight")),
    Case("checkpoint-corrupt", _corrupt_checkpoint,
         ("model.torch.checkpoint: cannot load", "garbage.pt", "weights_only=True")),
    Case("factory-missing", _with(model=_torch_model(factory="model:make_it")),
         ("model.torch.factory", "no attribute 'make_it'")),
    Case("onnx-corrupt", _corrupt_onnx, ("model.onnx:", "bad.onnx is not a valid ONNX model")),
    Case("onnx-truncated", _truncated_onnx,
         ("model.onnx:", "bad.onnx is not a valid ONNX model")),
    Case("onnx-input-name-mismatch", _onnx_wrong_input_name,
         ("model.inputs declares ['features']", "tiny.onnx has inputs ['x']")),
    Case("data-wrong-shape", _loader("baddata:wrong_shape"),
         ("data.calibration", "input 'image' has shape (10, 1, 9, 9)", "(1, 8, 8)")),
    Case("data-loader-raises", _loader("baddata:boom"),
         ("data.calibration", "baddata:boom", "ValueError", "the dataset server said no")),
    Case("data-loader-module-missing", _loader("nosuchdata:calibration"),
         ("data.calibration", "cannot import module 'nosuchdata'")),
    Case("data-npz-missing", _missing_npz, ("data.calibration: inputs file not found", "calib.npz")),
    Case("data-integer-dtype", _loader("baddata:integers"),
         ("data.calibration: feed 0, input 'image' has dtype int64", "takes float32")),
    Case("unknown-profile", _with(targets=["raspberry-pi-9"]),
         ("targets[1]: unknown profile 'raspberry-pi-9'", "Known profiles:", "host-cpu"),
         validate=True),
    Case("profile-invalid-field", _bad_profile_file,
         ("targets[1]:", "my-board.yaml:4: budget.latency_p90_ms: Input should be a valid number"),
         validate=True),
    Case("int8-static-without-calibration", _no_calibration,
         ("stage 2 (quantize, int8-static) needs data.calibration",)),
    # Fails in stage 2, after export.onnx finished: its stage folder must be rolled back.
    Case("int8-dynamic-on-cnn", _dynamic_on_cnn,
         ("stage 2 (quantize)", "3 Conv", "int8-dynamic", "ConvInteger", "force: true"),
         during_run=True),
    Case("stage-input-unknown", _unknown_input_stage,
         ("stage 2 (quantize) takes input 'exported'", "not an earlier stage"),
         validate=True),
    Case("declared-shape-vs-data", _declared_shape(None),
         ("data.calibration: input 'image' has shape (256, 1, 8, 8)",
          "the model takes (1, 3, 8, 8) per call", "each sample must be (3, 8, 8)")),
    Case("declared-shape-vs-model", _declared_shape(
        {"calibration": "baddata:three_channels", "metric": {"type": "fidelity"}}),
         ("model fails on one call with inputs shaped {'image': [1, 3, 8, 8]}",
          "expected input[1, 3, 8, 8] to have 1 channels")),
    # No data: the pre-flight forward pass is skipped, so the wrong shape only shows up
    # inside export.onnx, whose first `model(*example)` is outside its try block.
    Case("declared-shape-no-data", _declared_shape({}),
         ("[1, 3, 8, 8]", "1 channels")),
    # INT4, fp16 and accuracy-aware quantization
    Case("int4-on-a-model-without-matmul", _int4_on_conv_only,
         ("int4-weight-only quantizes the weights of MatMul/Gemm layers", "Conv",
          "scheme: int8-static"), during_run=True),
    Case("int4-block-size-not-power-of-two",
         _quantize_with(scheme="int4-weight-only", block_size=24),
         ("block_size must be a power of 2",), validate=True),
    Case("max-drop-without-evaluation-data", _max_drop_without_evaluation,
         ("stage 2 (quantize, int8-static) needs data.evaluation",)),
    Case("backend-without-that-scheme",
         _quantize_with(backend="neural-compressor", scheme="fp16"),
         ("backend: a setting of int8-static or int4-weight-only, not of fp16",), validate=True),
    Case("backend-without-that-algorithm",
         _quantize_with(scheme="int4-weight-only", algorithm="gptq"),
         ("algorithm gptq is not offered by backend onnxruntime",), validate=True),
    Case("neural-compressor-on-an-onnx-artifact",
         _quantize_with(backend="neural-compressor", scheme="int8-static"),
         ("stage 2 (quantize) takes a torch model, but its input is an ONNX model (made by "
          "stage 1 (export.onnx))", "input: source"), validate=True),
    Case("gptq-on-a-cnn", _quantize_with(backend="neural-compressor", input="source",
                                         scheme="int4-weight-only", algorithm="gptq"),
         ("neural-compressor's GPTQ failed on this model", "try algorithm: rtn"),
         during_run=True, marks=(pytest.mark.skipif(importlib.util.find_spec("neural_compressor") is None,
                                   reason="the inc extra is not installed"),)),
    Case("hqq-with-embeddings",
         _quantize_with(scheme="int4-weight-only", algorithm="hqq", quantize_embeddings=True),
         ("HQQ quantizer cannot quantize embeddings",), validate=True),
    Case("max-drop-with-neural-compressor-int4",
         _quantize_with(backend="neural-compressor", scheme="int4-weight-only", max_drop=0.01),
         ("max_drop with backend neural-compressor is its autotune",), validate=True),
    Case("qat-without-training-data", _quantize_with(scheme="int8-qat", input="source"),
         ("stage 2 (quantize, int8-qat) needs data.train",)),
    Case("max-drop-on-fp16", _quantize_with(scheme="fp16", max_drop=0.01),
         ("max_drop: a setting of int8-static, int8-dynamic or int4-weight-only, not of fp16",),
         validate=True),
    Case("max-drop-targets-without-accuracy-budget", _max_drop_from_targets_without_budget,
         ("max_drop: targets needs a target profile with a budget.accuracy_drop",),
         validate=True),
    # TFLite and LiteRT
    Case("provider-option-unknown", _unknown_provider_option,
         ("CUDAExecutionProvider has no option 'device'", "device_id", "check_options")),
    Case("provider-unknown", _unknown_provider,
         ("unknown execution provider 'CudaExecutionProvider'", "CUDAExecutionProvider")),
    Case("tflite-modes-conflict", _conflicting_tflite_modes,
         ("stages[1] (export.tflite):", "rpi4 wants int8", "my-board wants fp16",
          "set `mode` on this stage"),
         validate=True),
    Case("profile-unknown-engine", _unknown_engine,
         ("my-board.yaml:21: runtime.engines[1]:", "'onnxruntime', 'litert', 'openvino', 'onnxruntime-genai', 'llama.cpp', 'openvino-genai' or 'auto'"), validate=True),
    Case("tflite-int8-from-profile-without-calibration", _int8_from_profile_without_calibration,
         ("stage 1 (export.tflite, int8, preset arm64) needs data.calibration",)),
    Case("tflite-source-corrupt", _corrupt_tflite_source,
         ("model.tflite: LiteRT cannot load", "given.tflite", "complete .tflite model")),
    Case("tflite-source-with-export-stage", _tflite_source_with_export,
         ("stage 1 (export.onnx) takes a torch model, but its input is a TFLite model",
          "start the pipeline from the torch model"),
         validate=True),
    Case("accuracy-without-labels", _loader("data:calibration", "baddata:no_labels"),
         ("data.metric is accuracy but data.evaluation has no labels",)),
]


def _user_module(module: str, source: str, where: str) -> Callable[[Path], Path]:
    """A user module next to the pipeline, named as the factory, a loader or the metric."""
    def build(project: Path) -> Path:
        (project / f"{module}.py").write_text(textwrap.dedent(source))
        data = pipeline_dict(stages=[{"type": "export.onnx"}], targets=[])
        if where == "model":
            data["model"]["torch"] = {"factory": f"{module}:f"}
        elif where == "metric":
            data["data"]["metric"] = {"type": "custom", "function": f"{module}:f"}
        else:
            data["data"][where] = f"{module}:f"
        return write_pipeline(project, data)
    return build


SHADOW_JSON = """\
    import numpy as np

    def f():
        return {"image": np.random.rand(8, 1, 8, 8).astype(np.float32)}
    """

# Cases that need a fresh interpreter: user code that exits or replaces modules at import.
CASES += [
    Case("factory-sys-exit-at-import", _user_module("mymodel", "import sys\nsys.exit(3)\n",
                                                    "model"),
         ("model.torch.factory: importing module 'mymodel' failed: SystemExit: 3",)),
    Case("loader-sys-exit-at-import", _user_module("baddata", "raise SystemExit('bye')\n",
                                                   "calibration"),
         ("data.calibration: importing module 'baddata' failed: SystemExit: bye",)),
    Case("metric-sys-exit-at-import", _user_module("mymetric", "import sys\nsys.exit()\n",
                                                   "metric"),
         ("data.metric.function: importing module 'mymetric' failed: SystemExit",)),
    Case("loader-import-error-at-import", _user_module(
        "baddata", "import pandas_that_is_not_installed\n", "calibration"),
         ("cannot import module 'baddata'", "pandas_that_is_not_installed")),
    # A loader module next to the pipeline named like a module the product imports
    # (json.py): it replaces sys.modules['json'] and the run crashes later.
    Case("loader-module-shadows-stdlib", _user_module("json", SHADOW_JSON, "calibration"),
         ("json",)),
]

# Values beyond float32's range in float64 data: numpy's RuntimeWarning is printed before
# the error, and the error says NaN or infinity where the data holds neither.
CASES += [
    Case("loader-data-overflows-float32", _user_module(
        "baddata", "import numpy as np\n\ndef f():\n"
        "    return {'image': np.full((4, 1, 8, 8), 1e300)}\n", "calibration"),
         ("data.calibration", "float32")),
]

CATEGORIES = {
    "yaml": ("yaml-",), "pipeline": ("unknown-top-level", "missing-model",
                                     "pipeline-file-missing"),
    "model": ("checkpoint-", "factory-", "declared-shape"), "onnx": ("onnx-",),
    "tflite": ("tflite-",), "data": ("data-", "loader-", "accuracy-without"),
    "metric": ("metric-",), "targets": ("unknown-profile", "profile-", "provider-"),
    "stages": ("unknown-stage", "wrong-type", "int8-", "int4-", "stage-", "max-drop",
               "backend-", "neural-", "gptq", "hqq", "qat-", "tflite-int8"),
}


def _category(case: Case) -> str:
    for category, prefixes in CATEGORIES.items():
        if case.id.startswith(prefixes):
            return category
    return "stages"


CASES = [Case(**{**case.__dict__, "category": _category(case)}) for case in CASES]


def _params():
    for case in CASES:
        yield pytest.param(case, id=f"{case.category}:{case.id}", marks=case.marks)


@pytest.mark.parametrize("case", _params())
def test_bad_input_fails_cleanly(project: Path, case: Case):
    pipeline_path = case.build(project)
    result = run_cli("run", pipeline_path, "--quiet", cwd=project)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert result.stderr.startswith("error:"), output
    assert "Traceback" not in output, output
    expects = [e(pipeline_path) if callable(e) else e for e in case.expect]
    for expected in expects:
        assert expected in result.stderr, f"{expected!r} not in: {result.stderr}"
    # a failed stage leaves nothing half-written (no .partial folder, no report); one
    # found before any work leaves nothing at all, one found by a stage keeps the
    # complete stages before it, for the re-run to resume from
    runs = project / "runs"
    partial = sorted(str(p) for p in runs.rglob("*") if ".partial" in p.name or
                     p.name.startswith("report."))
    assert not partial, f"half-written: {partial}"
    if not case.during_run:
        leftovers = sorted(str(p) for p in runs.rglob("stage.json"))
        assert not leftovers, f"found before any work, yet stages ran: {leftovers}"

    if case.validate:
        check = run_cli("validate", pipeline_path, cwd=project)
        assert check.returncode == 2, check.stdout + check.stderr
        assert check.stderr.startswith("error:"), check.stderr
        assert "Traceback" not in check.stdout + check.stderr
        for expected in expects:
            assert expected in check.stderr, f"{expected!r} not in: {check.stderr}"


def _sibling(name: str):
    """Another corpus file of this folder, loaded under a private name."""
    import importlib.util
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"_corpus_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_corpus_is_large_enough():
    """This file's subprocess cases, the in-process cases and the runner's: at least 150
    distinct ids, spread over every part of the input."""
    inprocess = _sibling("test_bad_input_inprocess.py").CASES
    runner = _sibling("test_bad_input_runner.py").corpus_ids()
    ids = ([f"run-{c.id}" for c in CASES] + [f"inprocess-{c.id}" for c in inprocess] + runner)
    assert len(set(ids)) == len(ids)
    assert len({case.id for case in CASES}) == len(CASES)
    assert len(ids) >= 150, len(ids)
    categories = {c.category for c in CASES} | {c.category for c in inprocess}
    assert categories >= {"yaml", "pipeline", "model", "onnx", "tflite", "data", "metric",
                          "stages", "targets", "profiles", "ssh", "cli"}, categories
