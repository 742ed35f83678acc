"""The bad-input corpus, in-process: every case ends `compress` (called as
`compress.cli.main(argv)` in this process, so torch is imported once for all of them) with
exit code 2, one message on stderr that starts with `error: ` and names the problem, no
traceback, and nothing half-written in the run directory. Cases a look at the YAML can
catch are also run through `compress validate`.

The cases that need a fresh interpreter (sys.exit at import, module caching) and those
found only by a stage are in test_bad_input.py, as subprocesses.

Cases marked xfail(strict=True) are defects found by this corpus: the test asserts the
promised behaviour, and fails until the product is fixed (then the mark must go).
"""
from __future__ import annotations

import copy
import os
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Union

import numpy as np
import pytest
import yaml

from compress import cli
from tests.conftest import pipeline_dict, write_pipeline

REPO = Path(__file__).resolve().parents[3]
HOST_CPU = yaml.safe_load((REPO / "profiles" / "host-cpu.yaml").read_text())
FIXTURES = REPO / "tests" / "fixtures"

Build = Callable[[Path], Union[Path, list]]


@dataclass(frozen=True)
class Case:
    id: str
    category: str                      # yaml, pipeline, model, onnx, tflite, data, metric,
                                       # stages, targets, profiles, ssh, cli
    build: Build                       # project -> pipeline path (`compress run` it), or argv
    expect: tuple                      # substrings of the message (callables: of the path)
    validate: bool = False             # `compress validate` must reject it too
    during_run: tuple = ()             # found by a stage: the stage folders that stay
    absent: tuple = ()                 # substrings the message must not hold
    xfail: str | None = None           # a defect: the product breaks its promise here


# --- builders ------------------------------------------------------------------------


def _text(text: str, name: str = "pipeline.yaml") -> Build:
    def build(project: Path) -> Path:
        path = project / name
        path.write_text(textwrap.dedent(text))
        return path
    return build


def _bytes(data: bytes) -> Build:
    def build(project: Path) -> Path:
        path = project / "pipeline.yaml"
        path.write_bytes(data)
        return path
    return build


def _base_text() -> str:
    return yaml.safe_dump(pipeline_dict(), sort_keys=False)


def _replace(old: str, new: str) -> Build:
    """The base pipeline's YAML text with one piece of text replaced."""
    def build(project: Path) -> Path:
        text = _base_text()
        assert old in text, (old, text)
        path = project / "pipeline.yaml"
        path.write_text(text.replace(old, new, 1))
        return path
    return build


def _append(extra: str) -> Build:
    def build(project: Path) -> Path:
        path = project / "pipeline.yaml"
        path.write_text(_base_text() + textwrap.dedent(extra))
        return path
    return build


def _with(**overrides) -> Build:
    return lambda project: write_pipeline(project, pipeline_dict(**overrides))


def _edit(change: Callable[[dict], None], before: Callable[[Path], None] | None = None) -> Build:
    """The base pipeline dict, changed in place by `change`."""
    def build(project: Path) -> Path:
        if before is not None:
            before(project)
        data = pipeline_dict()
        change(data)
        return write_pipeline(project, data)
    return build


def _stage(index: int, **settings) -> Build:
    """Stage `index` of the base pipeline replaced by `settings`."""
    return _edit(lambda d: d["stages"].__setitem__(index, settings))


def _quantize(**settings) -> Build:
    return _stage(1, type="quantize", **settings)


def _model(**model) -> Build:
    return _edit(lambda d: d.__setitem__("model", model))


def _torch(**torch_settings) -> dict:
    return {"torch": {"factory": "model:build", "checkpoint": "digits_cnn.pt", **torch_settings},
            "inputs": [{"name": "image", "shape": [1, 1, 8, 8], "dtype": "float32"}]}


def _inputs(*decls) -> dict:
    return {"torch": {"factory": "model:build", "checkpoint": "digits_cnn.pt"},
            "inputs": list(decls)}


def _file(name: str, content: Union[str, bytes]) -> Callable[[Path], None]:
    def write(project: Path) -> None:
        path = project / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(
            textwrap.dedent(content))
    return write


def _code(module: str, source: str, where: str = "model", spec: str | None = None,
          **overrides) -> Build:
    """A user module `module.py` in the project, named by `where` (model: the factory,
    calibration / evaluation: a loader, metric: the custom metric function)."""
    def build(project: Path) -> Path:
        _file(f"{module}.py", source)(project)
        data = pipeline_dict(**overrides)
        name = spec or f"{module}:f"
        if where == "model":
            data["model"]["torch"]["factory"] = name
            data["model"]["torch"].pop("checkpoint", None)
        elif where == "metric":
            data["data"]["metric"] = {"type": "custom", "function": name}
        else:
            data["data"][where] = name
        return write_pipeline(project, data)
    return build


WEIRD_MODEL = """\
    import torch
    from torch import nn

    class Odd(nn.Module):
        def __init__(self, returns):
            super().__init__()
            self.fc, self.returns = nn.Linear(64, 10), returns

        def forward(self, image):
            logits = self.fc(torch.flatten(image, 1))
            return {"none": None, "text": "logits"}.get(self.returns, logits)

    def none():
        return Odd("none")

    def text():
        return Odd("text")
    """

# A pipeline that stops after the preflight (or after export.onnx): no quantization,
# no benchmark, so a case that is (wrongly) accepted still ends in seconds.
SHORT = {"stages": [{"type": "export.onnx"}], "targets": []}


def _loader(body: str, role: str = "calibration", **overrides) -> Build:
    """A loader module returning what `body` (the function's body) returns."""
    source = "import numpy as np\n\ndef f():\n" + textwrap.indent(textwrap.dedent(body), "    ")
    return _code("baddata", source, where=role, **{**SHORT, **overrides})


def _metric(body: str) -> Build:
    source = "import numpy as np\n\ndef f(predictions, references):\n" + \
        textwrap.indent(textwrap.dedent(body), "    ")
    return _code("mymetric", source, where="metric", **SHORT)


def _npz(arrays: dict | None = None, raw: bytes | None = None, role: str = "calibration"
         ) -> Build:
    def build(project: Path) -> Path:
        path = project / "given.npz"
        if raw is not None:
            path.write_bytes(raw)
        else:
            np.savez(path, **arrays)
        data = pipeline_dict(**SHORT)
        data["data"][role] = "given.npz"
        return write_pipeline(project, data)
    return build


def _truncated_npz(project: Path) -> Path:
    path = project / "full.npz"
    np.savez(path, image=np.zeros((20, 1, 8, 8), np.float32))
    return _npz(raw=path.read_bytes()[:300])(project)


# --- ONNX models made with onnx.helper (milliseconds) -------------------------------


def _onnx_model(opset: int = 13, in_name: str = "x", elem: int | None = None,
                shape=(1, 4), op: str = "MatMul", domain: str = "", weight=(4, 3),
                outputs: bool = True, ir_version: int = 8):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    elem = TensorProto.FLOAT if elem is None else elem
    weights = numpy_helper.from_array(np.ones(weight, np.float32), "W")
    node = helper.make_node(op, [in_name, "W"], ["y"], domain=domain)
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, (shape[0], 3))] if outputs \
        else []
    graph = helper.make_graph([node] if outputs else [], "g",
                              [helper.make_tensor_value_info(in_name, elem, shape)], out,
                              [weights] if outputs else [])
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)]
                                                  if domain else [])
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = ir_version
    assert isinstance(model, onnx.ModelProto)
    return model


def _identity_model(elem: int):
    from onnx import helper
    graph = helper.make_graph([helper.make_node("Identity", ["s"], ["y"])], "g",
                              [helper.make_tensor_value_info("s", elem, (1, 4))],
                              [helper.make_tensor_value_info("y", elem, (1, 4))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _onnx(make: Callable, inputs: list | None = None, data: dict | None = None,
          stages: list | None = None, save: Callable | None = None) -> Build:
    """A pipeline on an ONNX file `given.onnx` written by `make()` (a ModelProto) or
    `save(path)`; no data unless given."""
    def build(project: Path) -> Path:
        import onnx
        path = project / "given.onnx"
        if save is not None:
            save(path)
        else:
            onnx.save(make(), str(path))
        model = {"onnx": "given.onnx"}
        if inputs is not None:
            model["inputs"] = inputs
        return write_pipeline(project, pipeline_dict(
            model=model, data=data or {}, targets=[],
            stages=stages or [{"type": "quantize", "scheme": "int8-dynamic"}]))
    return build


def _external_missing(path: Path) -> None:
    import onnx
    onnx.save(_onnx_model(), str(path), save_as_external_data=True, location="given.data",
              size_threshold=0)
    (path.parent / "given.data").unlink()


def _external_outside(path: Path) -> None:
    import onnx
    onnx.save(_onnx_model(), str(path), save_as_external_data=True, location="given.data",
              size_threshold=0)
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = os.path.relpath("/etc/passwd", path.parent)
    onnx.save(model, str(path))


def _save_onnx(name: str) -> Callable[[Path], None]:
    def save(project: Path) -> None:
        import onnx
        onnx.save(_onnx_model(), str(project / name))
    return save


def _other_weights(project: Path) -> None:
    """A state_dict of some other model."""
    import torch
    torch.save({"fc.weight": torch.zeros(2)}, project / "other.pt")


def _write_bytes(content: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(content)


def _no_opset(path: Path) -> None:
    import onnx
    model = _onnx_model()
    del model.opset_import[:]
    onnx.save(model, str(path))


def _quickstart_onnx(inputs: list | None = None, data: dict | None = None) -> Build:
    """The quickstart model as ONNX (copied from the session's export, see run_case)."""
    def build(project: Path) -> Path:
        model = {"onnx": "digits.onnx"}
        if inputs is not None:
            model["inputs"] = inputs
        return write_pipeline(project, pipeline_dict(
            model=model, data=data or {}, targets=[],
            stages=[{"type": "quantize", "scheme": "int8-static"}]))
    build.needs_quickstart_onnx = True
    return build


def _tflite(content: bytes | None = None, inputs: list | None = None,
            stages: list | None = None, model_file: str = "given.tflite") -> Build:
    def build(project: Path) -> Path:
        if content is not None:
            (project / "given.tflite").write_bytes(content)
        model = {"tflite": model_file}
        if inputs is not None:
            model["inputs"] = inputs
        return write_pipeline(project, pipeline_dict(
            model=model, data={}, targets=[],
            stages=stages or [{"type": "benchmark", "warmup": 1, "runs": 2}]))
    return build


FP32_TFLITE = (FIXTURES / "digits_cnn_fp32.tflite").read_bytes()


# --- profiles --------------------------------------------------------------------------


def _profile(change: Callable[[dict], None] | None = None, text: str | bytes | None = None,
             **pipeline_overrides) -> Build:
    """A pipeline whose only target is my-board.yaml: host-cpu changed by `change`, or
    the file's own `text`."""
    def build(project: Path) -> Path:
        path = project / "my-board.yaml"
        if text is not None:
            path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
        else:
            profile = copy.deepcopy(HOST_CPU)
            profile["name"] = "my-board"
            if change is not None:
                change(profile)
            path.write_text(yaml.safe_dump(profile, sort_keys=False))
        return write_pipeline(project, pipeline_dict(targets=["my-board.yaml"],
                                                     **pipeline_overrides))
    return build


def _with_onnx_benchmark(project: Path, name: str, change: Callable[[dict], None]) -> Path:
    """An ONNX model measured (random inputs) on one target, a changed host-cpu: a mistake
    the benchmark finds, after the source is committed."""
    import onnx
    onnx.save(_onnx_model(), str(project / "given.onnx"))
    profile = copy.deepcopy(HOST_CPU)
    profile["name"] = "my-board"
    profile["runtime"]["engines"] = ["onnxruntime"]
    change(profile)
    (project / name).write_text(yaml.safe_dump(profile, sort_keys=False))
    return write_pipeline(project, pipeline_dict(model={"onnx": "given.onnx"}, data={},
                                                 stages=BENCH, targets=[name]))


def _python_without_numpy(project: Path) -> Path:
    """A local target whose `python:` runs but has no numpy (like a system python3)."""
    python = project / "python3"
    python.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'numpy'\" >&2\n"
                      "exit 1\n")
    python.chmod(0o755)
    import onnx
    onnx.save(_onnx_model(), str(project / "given.onnx"))
    return write_pipeline(project, pipeline_dict(
        model={"onnx": "given.onnx"}, data={}, stages=BENCH,
        targets=[{"profile": "host-cpu", "python": "python3"}]))


def _set(*keys_and_value) -> Callable[[dict], None]:
    *keys, value = keys_and_value

    def change(profile: dict) -> None:
        node = profile
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return change


def _delete(key: str) -> Callable[[dict], None]:
    return lambda profile: profile.pop(key)


def _target(**target) -> Build:
    return _with(targets=[{"profile": "host-cpu", **target}])


def _ssh_identity(content: str | None) -> Build:
    """An SSH target whose identity file holds `content` (None: no such file). The
    identity is checked before any connection is tried."""
    def build(project: Path) -> Path:
        if content is not None:
            (project / "id_test").write_text(content)
        return write_pipeline(project, pipeline_dict(
            stages=[{"type": "benchmark", "warmup": 1, "runs": 2}],
            data={"calibration": "data:calibration"},
            targets=[{"profile": "host-cpu", "ssh": "pi@127.0.0.1:1", "identity": "id_test",
                      "known_hosts": "known_hosts", "connect_timeout_s": 2}]))
    return build


# --- the CLI ---------------------------------------------------------------------------


def _argv(*args) -> Build:
    """`compress ARGS`; `{project}` in an argument is the project folder."""
    def build(project: Path) -> list:
        for write in [a for a in args if callable(a)]:
            write(project)
        return [a.format(project=project) for a in args if not callable(a)]
    return build


# --- the corpus ------------------------------------------------------------------------

PY_TAG = "!!python/object/apply:os.system ['echo owned']\n"
DEEP = "name: t\nx: " + "[" * 80 + "]" * 80 + "\n"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(6))
DIGITS_IMAGE = [{"name": "image", "shape": [1, 1, 8, 8], "dtype": "float32"}]
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0pVmY0yH3 pi@board\n"
BENCH = [{"type": "benchmark", "warmup": 1, "runs": 2, "rounds": 1}]

CASES = [
    # ---- the YAML file itself
    Case("yaml-tab-indent", "yaml", _text("name: t\n\tmodel: x\n"),
         ("pipeline.yaml:2:", "not valid YAML", "'\\t'"), validate=True),
    Case("yaml-scalar-document", "yaml", _text("42\n"),
         ("pipeline.yaml:1:", "must be a YAML mapping"), validate=True),
    Case("yaml-null-document", "yaml", _text("null\n"),
         ("must be a YAML mapping",), validate=True),
    Case("yaml-two-documents", "yaml", _append("---\nname: u\n"),
         ("not valid YAML", "another document"), validate=True),
    Case("yaml-python-tag", "yaml", _text(PY_TAG),
         ("not valid YAML", "could not determine a constructor", "python/object"),
         validate=True),
    Case("yaml-custom-tag", "yaml", _replace("name: t", "name: !custom t"),
         ("pipeline.yaml:1:", "'!custom'"), validate=True),
    Case("yaml-unhashable-key", "yaml", _append("? [a, b]\n: 1\n"),
         ("not valid YAML", "unhashable key"), validate=True),
    Case("yaml-integer-key", "yaml", _append("1: 2\n"), ("Keys should be strings",),
         validate=True),
    Case("yaml-latin1", "yaml", _bytes(_base_text().replace("name: t", "# caf\xe9\nname: t")
                                       .encode("latin-1")),
         ("pipeline.yaml:1:", "not UTF-8", "0xe9", "Latin-1"), validate=True),
    Case("yaml-utf16", "yaml", _bytes(_base_text().encode("utf-16")),
         ("UTF-16 text, not UTF-8",), validate=True),
    Case("yaml-binary", "yaml", _bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256))),
         ("binary data, not UTF-8",), validate=True),
    Case("yaml-too-deep", "yaml", _text(DEEP), ("nested more than 64 levels",), validate=True),
    Case("yaml-alias-bomb", "yaml", _text(BOMB), ("aliases expand it to more than 100000",),
         validate=True),
    Case("yaml-recursive-alias", "yaml", _text("a: &a [1, *a]\n"),
         ("an alias refers to a mapping or list it is inside of",), validate=True),
    Case("yaml-duplicate-key", "yaml", _append("name: again\n"),
         ("key 'name' is written twice, at lines 1 and",), validate=True),
    Case("yaml-duplicate-stage-key", "yaml",
         _replace("- type: quantize\n", "- type: quantize\n  type: quantize\n"),
         ("key 'type' is written twice",), validate=True),
    Case("yaml-too-big", "yaml", _text("name: t\n# " + "x" * (4 * 2**20 + 10) + "\n"),
         ("a pipeline or profile is text of at most 4 MiB",), validate=True),
    Case("yaml-unclosed-quote", "yaml", _replace("name: t", "name: 't"),
         ("not valid YAML",), validate=True),
    Case("yaml-nan-number", "yaml", _replace("runs: 20", "runs: 20\n  min_seconds: .nan"),
         ("stages[3] (benchmark).min_seconds", "finite number"), validate=True),
    Case("yaml-inf-number", "yaml", _replace("- type: export.onnx", "- type: export.onnx\n  atol: .inf"),
         ("stages[1] (export.onnx).atol", "finite number"), validate=True),
    Case("yaml-merge-of-unknown-keys", "yaml", _append("x: &a {b: 1}\ny:\n  <<: *a\n"),
         ("x: unknown key",), validate=True),

    Case("validate-latin1", "yaml",
         _argv("validate", "p.yaml", _file("p.yaml", "# caf\xe9\nname: t\n".encode("latin-1"))),
         ("p.yaml:1:", "not UTF-8", "0xe9")),
    Case("validate-utf16", "yaml",
         _argv("validate", "p.yaml", _file("p.yaml", "name: t\n".encode("utf-16"))),
         ("p.yaml:", "UTF-16 text, not UTF-8",)),
    Case("validate-binary", "yaml",
         _argv("validate", "p.yaml", _file("p.yaml", b"\x00\x01\x02" + bytes(range(256)))),
         ("binary data, not UTF-8",)),

    # ---- the pipeline's top level
    Case("name-dot", "pipeline", _with(name="."), ("name:", "not '.' or '..'"), validate=True),
    Case("name-dotdot", "pipeline", _with(name=".."), ("not '.' or '..'",), validate=True),
    Case("name-too-long", "pipeline", _with(name="n" * 201), ("at most 200",), validate=True),
    Case("name-with-slash", "pipeline", _with(name="a/b"), ("name:", "should match pattern"),
         validate=True),
    Case("name-empty", "pipeline", _with(name=""), ("name:",), validate=True),
    Case("name-a-number", "pipeline", _with(name=12), ("name: Input should be a valid string",),
         validate=True),
    Case("seed-negative", "pipeline", _with(seed=-1), ("seed:", "greater than or equal to 0"),
         validate=True),
    Case("seed-too-big", "pipeline", _with(seed=2**32), ("seed:", "less than or equal to"),
         validate=True),
    Case("seed-fraction", "pipeline", _with(seed=1.5), ("seed:", "fractional part"),
         validate=True),
    Case("seed-text", "pipeline", _with(seed="abc"), ("seed:", "valid integer"), validate=True),
    Case("stages-empty", "pipeline", _with(stages=[]), ("stages:", "at least 1 item"),
         validate=True),
    Case("stages-a-mapping", "pipeline", _with(stages={"type": "benchmark"}),
         ("stages: Input should be a valid tuple",), validate=True),
    Case("benchmark-not-last", "pipeline",
         _with(stages=[{"type": "benchmark"}, {"type": "export.onnx"}]),
         ("(benchmark) must be the last stage",), validate=True),
    Case("stage-without-type-wording", "pipeline", _stage(0, opset=17),
         ("stages[1].type",), absent=("discriminator",), validate=True),
    Case("benchmark-not-last-numbered-from-one", "pipeline",
         _with(stages=[{"type": "benchmark"}, {"type": "export.onnx"}]),
         ("stage 1 (benchmark) must be the last stage",), validate=True),
    Case("stage-without-type", "pipeline", _stage(0, opset=17), ("stages[1].type", "required"),
         validate=True),
    Case("stage-as-string", "pipeline", _replace("- type: export.onnx\n  exporter: legacy", "- export.onnx"),
         ("stages[1]: Input should be a valid dictionary",), validate=True),
    Case("output-is-a-file", "pipeline", _edit(lambda d: d.update(output="taken"),
                                               before=_file("taken", "a file\n")),
         ("output 'taken' with name 't'", "is a file, not a folder")),
    Case("output-name-too-long", "pipeline", _with(output="o" * 300),
         ("longer than this file system allows",)),
    Case("output-nested-name-too-long", "pipeline", _with(output="runs/" + "o" * 300),
         ("longer than this file system allows",)),
    Case("output-a-number", "pipeline", _with(output=5), ("output: Input should be a valid string",),
         validate=True),
    Case("data-a-list", "pipeline", _with(data=["data:calibration"]),
         ("data: Input should be a valid dictionary",), validate=True),

    # ---- the model section: torch
    Case("model-without-source", "model", _model(inputs=DIGITS_IMAGE),
         ("model: give exactly one model source",), validate=True),
    Case("model-two-sources", "model", _model(onnx="a.onnx", **_torch()),
         ("give exactly one model source",), validate=True),
    Case("model-a-string", "model", _with(model="model.onnx"),
         ("model: Input should be a valid dictionary",), validate=True),
    Case("torch-without-inputs", "model", _model(torch={"factory": "model:build"}),
         ("a torch model needs `inputs:`",), validate=True),
    Case("torch-inputs-empty", "model", _model(torch={"factory": "model:build"}, inputs=[]),
         ("model.inputs:", "at least 1 item"), validate=True),
    Case("torch-dynamic-dimension", "model",
         _model(**_inputs({"name": "image", "shape": [None, 1, 8, 8]})),
         ("input(s) image of a torch model need every dimension", "dynamic_batch"),
         validate=True),
    Case("input-shape-zero", "model", _model(**_inputs({"name": "image", "shape": [1, 0, 8, 8]})),
         ("model.inputs[1].shape[2]: Input should be greater than 0",), validate=True),
    Case("input-shape-fraction", "model",
         _model(**_inputs({"name": "image", "shape": [1, 1.5, 8, 8]})),
         ("model.inputs[1].shape[2]", "fractional part"), validate=True),
    Case("input-shape-a-string", "model", _model(**_inputs({"name": "image", "shape": "1,1,8,8"})),
         ("model.inputs[1].shape: Input should be a valid tuple",), validate=True),
    Case("input-dtype-unknown", "model",
         _model(**_inputs({"name": "image", "shape": [1, 1, 8, 8], "dtype": "float"})),
         ("model.inputs[1].dtype", "'float32'"), validate=True),
    Case("input-without-name", "model", _model(**_inputs({"shape": [1, 1, 8, 8]})),
         ("model.inputs[1].name: required key is missing",), validate=True),
    Case("input-unknown-key", "model",
         _model(**_inputs({"name": "image", "shape": [1, 1, 8, 8], "layout": "nchw"})),
         ("model.inputs[1].layout: unknown key",), validate=True),
    Case("dynamic-batch-not-bool", "model", _model(**_torch(), dynamic_batch="maybe"),
         ("model.dynamic_batch: Input should be a valid boolean",), validate=True),
    Case("factory-kwargs-a-list", "model", _model(**_torch(kwargs=[1])),
         ("model.torch.kwargs: Input should be a valid dictionary",), validate=True),
    Case("factory-not-module-callable", "model", _model(**_torch(factory="model.build")),
         ("model.torch.factory", "module:function"), absent=("function-after", "_not_text"),
         validate=True),
    Case("factory-kwargs-unknown", "model", _model(**_torch(kwargs={"depth": 3})),
         ("model.torch.factory model:build raised TypeError", "depth")),
    Case("factory-not-callable", "model", _code("mymodel", "f = 42\n"),
         ("model.torch.factory", "'mymodel:f' is not callable")),
    Case("factory-syntax-error", "model", _code("mymodel", "def f(:\n    pass\n"),
         ("model.torch.factory", "module 'mymodel' has a syntax error", "line 1")),
    Case("factory-raises-at-import", "model", _code("mymodel", "raise RuntimeError('no GPU')\n"),
         ("importing module 'mymodel' failed: RuntimeError: no GPU",)),
    Case("factory-raises", "model", _code("mymodel", "def f():\n    raise KeyError('w')\n"),
         ("model.torch.factory mymodel:f raised KeyError",)),
    Case("factory-sys-exit-when-called", "model",
         _code("mymodel", "import sys\ndef f():\n    sys.exit(4)\n"),
         ("model.torch.factory mymodel:f raised SystemExit",)),
    Case("factory-returns-a-string", "model", _code("mymodel", "def f():\n    return 'net'\n"),
         ("model.torch.factory mymodel:f returned str, not a torch.nn.Module",)),
    Case("factory-returns-none", "model", _code("mymodel", "def f():\n    pass\n"),
         ("returned NoneType, not a torch.nn.Module",)),
    Case("forward-returns-none", "model",
         _code("mymodel", WEIRD_MODEL, spec="mymodel:none", data={
             "calibration": "data:calibration"}, **SHORT),
         ("forward() returns NoneType", "tensors")),
    Case("forward-returns-none-accuracy", "model",
         _code("mymodel", WEIRD_MODEL, spec="mymodel:none", **SHORT),
         ("None",)),
    Case("forward-returns-a-string", "model",
         _code("mymodel", WEIRD_MODEL, spec="mymodel:text", data={
             "calibration": "data:calibration"}, **SHORT),
         ("forward() returns str",), absent=("\x1b[",)),
    Case("checkpoint-a-directory", "model",
         _edit(lambda d: d["model"]["torch"].update(checkpoint="weights"),
               before=lambda p: (p / "weights").mkdir()),
         ("model.torch.checkpoint", "weights")),
    Case("checkpoint-a-text-file", "model",
         _edit(lambda d: d["model"]["torch"].update(checkpoint="notes.pt"),
               before=_file("notes.pt", "these are not weights\n")),
         ("model.torch.checkpoint: cannot load", "notes.pt", "weights_only=True")),
    Case("checkpoint-wrong-keys", "model",
         _edit(lambda d: d["model"]["torch"].update(checkpoint="other.pt"),
               before=_other_weights),
         ("other.pt does not match the factory's model", "Missing key")),
    Case("declared-shape-huge-without-data", "model",
         _with(model=_inputs({"name": "image", "shape": [100000, 100000, 100000, 8]}),
               data={}, **SHORT),
         ("model.inputs", "image")),
    Case("input-declared-twice", "model",
         _model(**_inputs({"name": "image", "shape": [1, 1, 8, 8]},
                          {"name": "image", "shape": [1, 1, 8, 8]})),
         ("image", "twice"), validate=True),

    # ---- ONNX models
    Case("onnx-shape-contradicts-graph", "onnx",
         _onnx(_onnx_model, inputs=[{"name": "x", "shape": [1, 5]}]),
         ("model.inputs declares input 'x' with shape [1, 5] but given.onnx takes [1, 4]",),
         validate=True),
    Case("onnx-rank-contradicts-graph", "onnx",
         _onnx(_onnx_model, inputs=[{"name": "x", "shape": [1, 4, 1]}]),
         ("with shape [1, 4, 1] but given.onnx takes [1, 4]",), validate=True),
    Case("onnx-one-input-too-many", "onnx",
         _onnx(_onnx_model, inputs=[{"name": "x", "shape": [1, 4]}, {"name": "z", "shape": [1]}]),
         ("model.inputs declares ['x', 'z'] but given.onnx has inputs ['x']",), validate=True),
    Case("onnx-dtype-contradicts-graph", "onnx",
         _onnx(_onnx_model, inputs=[{"name": "x", "shape": [1, 4], "dtype": "int64"}]),
         ("int64", "float"), validate=True),
    Case("onnx-string-input", "onnx", _onnx(lambda: _identity_model(8)),
         ("input 's'", "which this pipeline cannot feed"), validate=True),
    Case("onnx-bfloat16-input", "onnx", _onnx(lambda: _identity_model(16)),
         ("input 's'", "cannot feed"), validate=True),
    Case("onnx-unknown-op", "onnx", _onnx(lambda: _onnx_model(op="FooBar")),
         ("the ONNX checker refuses it", "No Op registered for FooBar"), validate=True),
    Case("onnx-custom-domain-op", "onnx", _onnx(lambda: _onnx_model(op="Foo", domain="com.acme"),
                                                inputs=[{"name": "x", "shape": [1, 4]}]),
         ("Foo (domain 'com.acme') is not an op this onnxruntime knows",)),
    Case("onnx-external-data-missing", "onnx", _onnx(None, save=_external_missing),
         ("keeps tensor 'W' in the external data file", "given.data, which is missing"),
         validate=True),
    Case("onnx-external-data-outside-folder", "onnx", _onnx(None, save=_external_outside),
         ("passwd", "outside"), validate=True),
    Case("onnx-empty-file", "onnx", _onnx(None, save=_write_bytes(b"")),
         ("given.onnx is not a valid ONNX model", "holds no graph"), validate=True),
    Case("onnx-a-text-file", "onnx", _onnx(None, save=_write_bytes(b"hello world\n")),
         ("given.onnx is not a valid ONNX model", "does not parse"), validate=True),
    Case("onnx-a-tflite-file", "onnx", _onnx(None, save=_write_bytes(FP32_TFLITE)),
         ("given.onnx is not a valid ONNX model",), validate=True),
    Case("onnx-ir-version-too-new", "onnx", _onnx(lambda: _onnx_model(ir_version=99)),
         ("ir_version 99",), validate=True),
    Case("onnx-opset-too-new", "onnx", _onnx(lambda: _onnx_model(opset=99),
                                             inputs=[{"name": "x", "shape": [1, 4]}]),
         ("its opset 99 is newer than this onnxruntime supports",)),
    Case("onnx-no-opset-import", "onnx", _onnx(None, save=_no_opset),
         ("imports no default-domain ONNX opset",), validate=True),
    Case("onnx-graph-shapes-disagree", "onnx", _onnx(lambda: _onnx_model(weight=(5, 3))),
         ("MatMul", "Incompatible dimensions for matrix multiplication")),
    Case("onnx-no-outputs", "onnx", _onnx(lambda: _onnx_model(outputs=False)),
         ("given.onnx", "onnxruntime cannot load or run it")),
    Case("onnx-dynamic-dims-without-data", "onnx", _onnx(lambda: _onnx_model(shape=("N", 4))),
         ("the model leaves dimensions dynamic ('x' axes [0]) and no data fixes them",)),
    Case("onnx-file-missing", "onnx", _onnx(None, save=lambda path: None),
         ("model.onnx: file not found",), validate=True),
    Case("onnx-quickstart-input-renamed", "onnx",
         _quickstart_onnx(inputs=[{"name": "pixels", "shape": [1, 1, 8, 8]}]),
         ("model.inputs declares ['pixels'] but digits.onnx has inputs ['image']",),
         validate=True),
    Case("onnx-quickstart-shape-contradicts-graph", "onnx",
         _quickstart_onnx(inputs=[{"name": "image", "shape": [1, 3, 8, 8]}]),
         ("with shape [1, 3, 8, 8] but digits.onnx takes [1, 1, 8, 8]",), validate=True),
    Case("onnx-quickstart-data-wrong-shape", "onnx",
         _quickstart_onnx(data={"calibration": "data:calibration",
                                "evaluation": "wrong.npz"}),
         ("data.evaluation", "(1, 8, 8)")),

    # ---- TFLite models
    Case("tflite-input-name-mismatch", "tflite", _tflite(FP32_TFLITE, inputs=DIGITS_IMAGE),
         ("model.inputs declares ['image'] but given.tflite has inputs",), validate=True),
    Case("tflite-a-text-file", "tflite", _tflite(b"not a model\n"),
         ("model.tflite: LiteRT cannot load", "given.tflite"), validate=True),
    Case("tflite-empty-file", "tflite", _tflite(b""),
         ("model.tflite: LiteRT cannot load",), validate=True),
    Case("tflite-file-missing", "tflite", _tflite(None, model_file="nope.tflite"),
         ("model.tflite: file not found",), validate=True),
    Case("tflite-int4-scheme", "tflite",
         _tflite(FP32_TFLITE, stages=[{"type": "quantize", "scheme": "int4-weight-only"}]),
         ("stage 1 (quantize) takes an ONNX model, but its input is a TFLite model",),
         validate=True),
    Case("tflite-prune-stage", "tflite",
         _tflite(FP32_TFLITE, stages=[{"type": "prune", "method": "magnitude",
                                       "sparsity": 0.5}]),
         ("stage 1 (prune) takes a torch model, but its input is a TFLite model",),
         validate=True),

    # ---- data: loaders returning the wrong thing, .npz files, data settings
    Case("loader-returns-none", "data", _loader("return None"),
         ("data.calibration: the data is NoneType",)),
    Case("loader-returns-a-string", "data", _loader("return 'digits.csv'"),
         ("data.calibration: the data is str",)),
    Case("loader-returns-an-int", "data", _loader("return 5"), ("the data is int",)),
    Case("loader-returns-empty-list", "data", _loader("return []"),
         ("data.calibration: the data holds no feeds",)),
    Case("loader-returns-empty-dict", "data", _loader("return {}"),
         ("no array for model input(s) ['image']; got keys []",)),
    Case("loader-returns-list-of-none", "data", _loader("return [None, None]"),
         ("data.calibration: item 0 is NoneType",)),
    Case("loader-returns-dict-of-strings", "data", _loader("return {'image': 'abc'}"),
         ("input 'image': holds str", "give numbers")),
    Case("loader-returns-object-array", "data",
         _loader("return {'image': np.array([object()] * 4)}"), ("dtype object",)),
    Case("loader-returns-ragged-lists", "data", _loader("return {'image': [[1, 2], [3]]}"),
         ("input 'image': cannot make an array of it",)),
    Case("loader-returns-complex", "data",
         _loader("return {'image': np.zeros((4, 1, 8, 8), np.complex64)}"),
         ("dtype complex64",)),
    Case("loader-returns-nested-dict", "data",
         _loader("return {'image': {'a': np.zeros((4, 1, 8, 8), np.float32)}}"),
         ("input 'image': holds dict",)),
    Case("loader-returns-bool", "data",
         _loader("return {'image': np.zeros((4, 1, 8, 8), bool)}"),
         ("feed 0, input 'image' has dtype bool; the model takes float32",)),
    Case("loader-returns-uint8", "data",
         _loader("return {'image': np.zeros((4, 1, 8, 8), np.uint8)}"),
         ("has dtype uint8", ".astype('float32')")),
    Case("loader-generator-raises-halfway", "data",
         _loader("def gen():\n    yield {'image': np.zeros((1, 1, 8, 8), np.float32)}\n"
                 "    raise IOError('disk gone')\nreturn gen()"),
         ("data.calibration: reading item 1 raised OSError: disk gone",)),
    Case("loader-generator-empty", "data", _loader("return (x for x in [])"),
         ("holds no feeds", "a generator can be read only once")),
    Case("loader-feeds-mixed-labels", "data",
         _loader("z = np.zeros((1, 1, 8, 8), np.float32)\n"
                 "return [{'image': z, 'labels': np.array([1])}, {'image': z}]"),
         ("some feeds have labels and others not",)),
    Case("loader-feeds-different-shapes", "data",
         _loader("return [{'image': np.zeros((1, 1, 8, 8), np.float32)},\n"
                 "        {'image': np.zeros((1, 2, 8, 8), np.float32)}]"),
         ("feed 1, input 'image' has shape (1, 2, 8, 8)", "(1, 1, 8, 8)")),
    Case("loader-feeds-different-keys", "data",
         _loader("z = np.zeros((1, 1, 8, 8), np.float32)\n"
                 "return [{'image': z}, {'img': z, 'mask': z}]"),
         ("feed 1",)),
    Case("loader-feed-extra-key", "data",
         _loader("return [{'image': np.zeros((1, 1, 8, 8), np.float32), 'mask': np.zeros(1)}]"),
         ("feed 0 has key(s) ['mask'] that are not inputs",)),
    Case("loader-data-nan", "data",
         _loader("return {'image': np.full((4, 1, 8, 8), np.nan, np.float32)}"),
         ("input 'image' holds NaN or infinity",)),
    Case("loader-data-inf", "data",
         _loader("a = np.zeros((4, 1, 8, 8), np.float32)\na[2, 0, 0, 0] = np.inf\n"
                 "return {'image': a}"),
         ("feed 2, input 'image' holds NaN or infinity",)),
    Case("loader-labels-count", "data",
         _loader("return (np.zeros((10, 1, 8, 8), np.float32), np.zeros(7, np.int64))"),
         ("7 labels for 10 samples",)),
    Case("loader-labels-strings", "data",
         _loader("return {'image': np.zeros((3, 1, 8, 8), np.float32), "
                 "'labels': np.array(['a', 'b', 'c'])}"),
         ("labels: holds ndarray of dtype <U1",)),
    Case("loader-labels-a-scalar", "data",
         _loader("return {'image': np.zeros((3, 1, 8, 8), np.float32), 'labels': 3}"),
         ("data.calibration", "labels")),
    Case("loader-evaluation-labels-out-of-range", "data",
         _loader("x = np.zeros((4, 1, 8, 8), np.float32)\n"
                 "return {'image': x, 'labels': np.array([0, 3, 12, 1])}", role="evaluation"),
         ("data.evaluation: labels run from 0 to 12", "10 classes (0..9)")),
    Case("loader-evaluation-labels-fractional", "data",
         _loader("x = np.zeros((4, 1, 8, 8), np.float32)\n"
                 "return {'image': x, 'labels': np.array([0.5, 1.5, 2.5, 3.5])}",
                 role="evaluation"),
         ("data.evaluation", "labels")),
    Case("loader-evaluation-labels-2d", "data",
         _loader("x = np.zeros((4, 1, 8, 8), np.float32)\n"
                 "return {'image': x, 'labels': np.zeros((4, 3), np.int64)}",
                 role="evaluation"),
         ("data.evaluation", "label")),
    Case("loader-needs-an-argument", "data",
         _code("baddata", "def f(n):\n    return None\n", where="calibration", **SHORT),
         ("the loader 'baddata:f' raised TypeError", "missing 1 required positional argument")),
    Case("loader-sys-exit-when-called", "data",
         _code("baddata", "import sys\ndef f():\n    sys.exit('no data today')\n",
               where="calibration", **SHORT),
         ("the loader 'baddata:f' raised SystemExit: no data today",)),
    Case("loader-attribute-missing", "data", _with(data={"calibration": "data:calibrate"}),
         ("data.calibration: module 'data' has no attribute 'calibrate'",)),
    Case("loader-syntax-error", "data",
         _code("baddata", "def f()\n    return 1\n", where="calibration", **SHORT),
         ("module 'baddata' has a syntax error",)),
    Case("npz-truncated", "data", _truncated_npz, ("data.calibration", "given.npz")),
    Case("npz-a-text-file", "data", _npz(raw=b"image: 1\n"),
         ("data.calibration", "given.npz"), absent=("pickled",)),
    Case("npz-wrong-array-name", "data",
         _npz({"pixels": np.zeros((4, 1, 8, 8), np.float32),
               "mask": np.zeros((4, 1), np.float32)}),
         ("no array for model input(s) ['image']", "'mask', 'pixels'")),
    Case("npz-object-array", "data",
         lambda p: _npz(raw=_object_npz(p))(p),
         ("data.calibration: cannot read inputs file", "allow_pickle=False")),
    Case("npz-empty", "data", _npz({}), ("no array for model input(s) ['image']; got keys []",)),
    Case("npz-wrong-sample-shape", "data", _npz({"image": np.zeros((4, 8, 8), np.float32)}),
         ("input 'image' has shape (4, 8, 8)", "each sample must be (1, 8, 8)")),
    Case("data-both-loader-and-npz", "data",
         _with(data={"calibration": {"loader": "data:calibration", "npz": "a.npz"}}),
         ("data.calibration: give exactly one of",), validate=True),
    Case("data-kwargs-without-loader", "data",
         _with(data={"calibration": {"npz": "a.npz", "kwargs": {"n": 1}}}),
         ("kwargs are the loader's arguments",), validate=True),
    Case("data-settings-empty", "data", _with(data={"calibration": {}}),
         ("data.calibration: give exactly one of",), validate=True),
    Case("data-unknown-role", "data", _with(data={"calibration": "data:calibration",
                                                  "validation": "data:evaluation"}),
         ("data.validation: unknown key",), validate=True),
    Case("data-kwargs-a-number", "data",
         _with(data={"calibration": {"loader": "data:calibration", "kwargs": 5}}),
         ("data.calibration.kwargs: Input should be a valid dictionary",), validate=True),
    Case("data-loader-key-misspelt", "data",
         _with(data={"calibration": {"loadr": "data:calibration"}}),
         ("loadr",), validate=True),
    Case("data-a-number-in-yaml", "data", _with(data={"calibration": 5}),
         ("data.calibration",), validate=True),
    Case("data-a-list-in-yaml", "data", _with(data={"calibration": ["a.npz", "b.npz"]}),
         ("data.calibration",), validate=True),
    Case("data-loader-name-malformed", "data", _with(data={"calibration": "data.calibration"}),
         ("data.calibration", "module:function"), absent=("function-after",), validate=True),
    Case("data-int8-static-without-calibration", "data",
         _with(data={"evaluation": "data:evaluation"}),
         ("stage 2 (quantize, int8-static) needs data.calibration",)),

    # ---- the metric
    Case("metric-unknown-type", "metric", _edit(lambda d: d["data"].update(metric={"type": "top5"})),
         ("data.metric.type", "'accuracy', 'fidelity' or 'custom'"), validate=True),
    Case("metric-a-string", "metric", _edit(lambda d: d["data"].update(metric="accuracy")),
         ("data.metric: Input should be a valid dictionary",), validate=True),
    Case("metric-custom-without-function", "metric",
         _edit(lambda d: d["data"].update(metric={"type": "custom"})),
         ("type custom needs `function: module:fn`",), validate=True),
    Case("metric-function-on-accuracy", "metric",
         _edit(lambda d: d["data"].update(metric={"type": "accuracy", "function": "m:f"})),
         ("function applies to `type: custom`",), validate=True),
    Case("metric-primary-on-accuracy", "metric",
         _edit(lambda d: d["data"].update(metric={"type": "accuracy", "primary": "cosine"})),
         ("primary and pairs apply to `type: fidelity`",), validate=True),
    Case("metric-spearman-without-pairs", "metric",
         _edit(lambda d: d["data"].update(metric={"type": "fidelity",
                                                  "primary": "pair_spearman"})),
         ("pair_spearman needs `pairs: true`",), validate=True),
    Case("metric-lower-is-better-on-accuracy", "metric",
         _edit(lambda d: d["data"].update(metric={"type": "accuracy",
                                                  "higher_is_better": False})),
         ("higher_is_better applies to `type: custom`",), validate=True),
    Case("metric-function-raises", "metric", _metric("raise ZeroDivisionError('no rows')"),
         ("data.metric.function mymetric:f raised ZeroDivisionError: no rows",)),
    Case("metric-function-returns-a-string", "metric", _metric("return 'great'"),
         ("returned 'great'; it must return one finite number",)),
    Case("metric-function-returns-nan", "metric", _metric("return float('nan')"),
         ("returned nan; it must return one finite number",)),
    Case("metric-function-returns-none", "metric", _metric("return None"),
         ("returned None; it must return one finite number",)),
    Case("metric-function-returns-a-bool", "metric", _metric("return True"),
         ("returned True; it must return one finite number",)),
    Case("metric-function-returns-an-array", "metric", _metric("return np.ones(3)"),
         ("it must return one finite number",)),
    Case("metric-function-sys-exit", "metric", _metric("raise SystemExit(1)"),
         ("data.metric.function mymetric:f raised SystemExit",)),
    Case("metric-function-module-missing", "metric",
         _edit(lambda d: d["data"].update(metric={"type": "custom", "function": "nomod:f"})),
         ("data.metric.function: cannot import module 'nomod'",)),
    Case("metric-function-a-number-in-yaml", "metric",
         _edit(lambda d: d["data"].update(metric={"type": "custom", "function": 5})),
         ("data.metric.function",), absent=("a Python function",), validate=True),

    # ---- stage settings out of range and wrong combinations
    Case("quantize-without-scheme", "stages", _quantize(),
         ("stages[2] (quantize).scheme: required key is missing",), validate=True),
    Case("quantize-percentile-100", "stages",
         _quantize(scheme="int8-static", calibration="percentile", percentile=100),
         ("stages[2] (quantize).percentile: Input should be less than 100",), validate=True),
    Case("quantize-percentile-50", "stages",
         _quantize(scheme="int8-static", calibration="percentile", percentile=50),
         ("percentile: Input should be greater than 90",), validate=True),
    Case("quantize-samples-zero", "stages", _quantize(scheme="int8-static", samples=0),
         ("stages[2] (quantize).samples: Input should be greater than 0",), validate=True),
    Case("quantize-accuracy-level-5", "stages",
         _quantize(scheme="int4-weight-only", accuracy_level=5),
         ("accuracy_level: Input should be 0, 1, 2, 3 or 4",), validate=True),
    Case("quantize-unknown-calibration", "stages", _quantize(scheme="int8-static",
                                                             calibration="kl"),
         ("stages[2] (quantize).calibration", "'minmax', 'entropy', 'percentile', 'mean_minmax' or 'mse'"),
         validate=True),
    Case("quantize-max-drop-negative", "stages", _quantize(scheme="int8-static", max_drop=-0.1),
         ("stages[2] (quantize).max_drop", "greater than or equal to 0"),
         absent=("constrained-float", "literal["), validate=True),
    Case("quantize-int16-activations-dynamic", "stages",
         _quantize(scheme="int8-dynamic", activations="int16"),
         ("activations: a setting of int8-static, not of int8-dynamic",), validate=True),
    Case("quantize-qnn-dynamic", "stages", _quantize(scheme="int8-dynamic", qnn=True),
         ("qnn: a setting of int8-static, not of int8-dynamic",), validate=True),
    Case("quantize-unknown-preset", "stages", _quantize(scheme="int8-static", preset="raspberry"),
         ("unknown preset 'raspberry'; known presets:",), validate=True),
    Case("quantize-tflite-preset", "stages", _quantize(scheme="int8-static", preset="edgetpu"),
         ("preset edgetpu has no settings for quantize int8-static",), validate=True),
    Case("quantize-exclude-nodes-a-string", "stages",
         _quantize(scheme="int8-static", exclude_nodes="conv1"),
         ("exclude_nodes: Input should be a valid tuple",), validate=True),
    Case("quantize-bias-correction-on-dynamic", "stages",
         _quantize(scheme="int8-dynamic", bias_correction=True, force=True),
         ("bias_correction", "int8-static"), validate=True),
    Case("quantize-hqq-on-int8", "stages", _quantize(scheme="int8-static", algorithm="hqq"),
         ("algorithm", "int4"), validate=True),
    Case("quantize-percentile-with-minmax", "stages",
         _quantize(scheme="int8-static", calibration="minmax", percentile=99.0),
         ("percentile",), validate=True),
    Case("stage-names-repeat", "stages",
         _edit(lambda d: (d["stages"][0].update(name="a"), d["stages"][1].update(name="a"))),
         ("stages[2].name: two stages are named 'a'",), validate=True),
    Case("stage-named-source", "stages", _edit(lambda d: d["stages"][0].update(name="source")),
         ("two stages are named 'source'",), validate=True),
    Case("stage-name-with-slash", "stages", _edit(lambda d: d["stages"][0].update(name="a/b")),
         ("stages[1] (export.onnx).name", "should match pattern"), validate=True),
    Case("stage-input-later-stage", "stages",
         _edit(lambda d: d["stages"][0].update(input="02-quantize")),
         ("stage 1 (export.onnx) takes input '02-quantize', which is not an earlier stage",),
         validate=True),
    Case("export-onnx-opset-too-new", "stages", _stage(0, type="export.onnx", opset=99),
         ("stages[1] (export.onnx).opset: Input should be less than or equal to 23",),
         validate=True),
    Case("export-onnx-opset-fraction", "stages", _stage(0, type="export.onnx", opset=17.5),
         ("opset", "fractional part"), validate=True),
    Case("export-onnx-unknown-exporter", "stages",
         _stage(0, type="export.onnx", exporter="tensorflow"),
         ("exporter: Input should be 'dynamo' or 'legacy'",), validate=True),
    Case("export-tflite-unknown-mode", "stages",
         _with(stages=[{"type": "export.tflite", "mode": "int4"}], targets=[]),
         ("stages[1] (export.tflite).mode",), validate=True),
    Case("export-tflite-int8-float-io", "stages",
         _with(stages=[{"type": "export.tflite", "mode": "int8", "io": "float"}], targets=[]),
         ("mode int8 quantizes the inputs and outputs too",), validate=True),
    Case("export-tflite-fp32-int8-io", "stages",
         _with(stages=[{"type": "export.tflite", "mode": "fp32", "io": "int8"}], targets=[]),
         ("io: int8 needs mode int8",), validate=True),
    Case("export-tflite-after-export-onnx", "stages",
         _with(stages=[{"type": "export.onnx"}, {"type": "export.tflite"}], targets=[]),
         ("stage 2 (export.tflite) takes a torch model, but its input is an ONNX model",
          "input: source"), validate=True),
    Case("prune-sparsity-one", "stages",
         _stage(0, type="prune", method="magnitude", sparsity=1.0), ("sparsity",),
         validate=True),
    Case("prune-n-not-below-m", "stages", _stage(0, type="prune", method="n:m", n=4, m=4),
         ("n:m needs n < m",), validate=True),
    Case("prune-n-m-with-sparsity", "stages",
         _stage(0, type="prune", method="n:m", sparsity=0.5),
         ("set `n` and `m`, not `sparsity`",), validate=True),
    Case("prune-channel-without-sparsity", "stages", _stage(0, type="prune", method="channel"),
         ("method channel needs `sparsity`",), validate=True),
    Case("prune-steps-one-shot", "stages",
         _stage(0, type="prune", method="magnitude", sparsity=0.5, steps=3),
         ("`steps` applies to `schedule: iterative` only",), validate=True),
    Case("distill-alpha-above-one", "stages", _stage(0, type="distill", alpha=2),
         ("alpha: Input should be less than or equal to 1",), validate=True),
    Case("distill-temperature-zero", "stages", _stage(0, type="distill", temperature=0),
         ("temperature: Input should be greater than 0",), validate=True),
    Case("train-epochs-negative", "stages",
         _stage(0, type="distill", train={"epochs": -1}),
         ("train.epochs: Input should be greater than or equal to 0",), validate=True),
    Case("train-unknown-optimizer", "stages",
         _stage(0, type="distill", train={"optimizer": "lbfgs"}),
         ("train.optimizer",), validate=True),
    Case("distill-teacher-checkpoint-missing", "stages",
         _with(data={"calibration": "data:calibration", "train": "data:train"}, targets=[],
               stages=[{"type": "distill", "teacher": {"checkpoint": "missing.pt"},
                        "train": {"epochs": 1}}]),
         ("stage 1 (distill): teacher.checkpoint: file not found", "missing.pt"),
         during_run=("00-source",)),
    Case("distill-student-module-missing", "stages",
         _with(data={"calibration": "data:calibration", "train": "data:train"}, targets=[],
               stages=[{"type": "distill", "student": {"factory": "nomod:build"},
                        "train": {"epochs": 1}}]),
         ("stage 1 (distill)", "student", "cannot import module 'nomod'"),
         during_run=("00-source",)),
    Case("prune-ignores-unknown-layer", "stages",
         _with(data={"calibration": "data:calibration"}, targets=[],
               stages=[{"type": "prune", "method": "channel", "sparsity": 0.5,
                        "ignore": ["nosuchlayer"]}]),
         ("stage 1 (prune): prune.ignore names ['nosuchlayer']", "features.0"),
         during_run=("00-source",)),
    Case("qat-on-onnx-artifact", "stages", _quantize(scheme="int8-qat"),
         ("stage 2 (quantize) takes a torch model, but its input is an ONNX model",),
         validate=True),
    Case("benchmark-rounds-zero", "stages",
         _stage(2, type="benchmark", rounds=0), ("rounds: Input should be greater than 0",),
         validate=True),
    Case("benchmark-timeout-negative", "stages", _stage(2, type="benchmark", timeout_s=-1),
         ("timeout_s: Input should be greater than 0",), validate=True),
    Case("benchmark-unknown-artifact", "stages", _stage(2, type="benchmark", artifacts=["nope"]),
         ("benchmark.artifacts: 'nope' is not a deployable artifact",), validate=True),
    Case("benchmark-torch-artifact", "stages", _stage(2, type="benchmark", artifacts=["source"]),
         ("'source' is not a deployable artifact",), validate=True),
    Case("benchmark-runs-a-bool", "stages", _stage(2, type="benchmark", runs=True),
         ("stages[3] (benchmark).runs",), validate=True),
    Case("benchmark-min-seconds-beyond-timeout", "stages",
         _stage(2, type="benchmark", min_seconds=1e9),
         ("stages[3] (benchmark)", "lower min_seconds or raise timeout_s"), validate=True),

    # ---- targets and profiles
    Case("target-listed-twice", "targets", _with(targets=["host-cpu", "host-cpu"]),
         ("targets[2]: target 'host-cpu' is listed twice",), validate=True),
    Case("target-empty-name", "targets", _with(targets=[""]),
         ("targets[1]: unknown profile ''",), validate=True),
    Case("target-a-folder", "targets",
         _edit(lambda d: d.update(targets=["boards.yaml"]),
               before=lambda p: (p / "boards.yaml").mkdir()),
         ("targets[1]: profile file not found",), validate=True),
    Case("target-null", "targets", _with(targets=[None]),
         ("targets[1]: Input should be a valid dictionary",), validate=True),
    Case("target-a-string-not-list", "targets", _with(targets="host-cpu"),
         ("targets: Input should be a valid tuple",), validate=True),
    Case("target-unknown-key", "targets", _target(host="pi"),
         ("targets[1].host: unknown key",), validate=True),
    Case("target-without-profile", "targets", _with(targets=[{"gate": False}]),
         ("targets[1].profile: required key is missing",), validate=True),
    Case("target-gate-not-bool", "targets", _target(gate="maybe"),
         ("targets[1].gate: Input should be a valid boolean",), validate=True),
    Case("target-name-with-space", "targets", _target(name="my board"),
         ("targets[1].name", "should match pattern"), validate=True),
    Case("target-python-missing", "targets", _target(python="/nonexistent/bin/python"),
         ("python '/nonexistent/bin/python' is not an executable Python here",)),
    Case("target-python-without-runtimes", "targets", _python_without_numpy,
         ("python 'python3' cannot run the benchmark runner", "numpy")),
    Case("profile-not-a-mapping", "profiles", _profile(text="- a\n- b\n"),
         ("my-board.yaml: a profile must be a mapping",), validate=True),
    Case("profile-empty-file", "profiles", _profile(text=""),
         ("a profile must be a mapping",), validate=True),
    Case("profile-bad-yaml", "profiles", _profile(text="name: [a\ndevice: {arch: any}\n"),
         ("my-board.yaml:2: not valid YAML",), validate=True),
    Case("profile-duplicate-key", "profiles",
         _profile(text="name: a\nname: b\ndevice: {arch: any}\n"),
         ("key 'name' is written twice, at lines 1 and 2",), validate=True),
    Case("profile-latin1", "profiles",
         _profile(text="name: a\ndescription: Jetson fran\xe7ais\ndevice: {arch: any}\n"
                  .encode("latin-1")),
         ("my-board.yaml:2:", "not UTF-8"), validate=True),
    Case("profile-alias-bomb", "profiles", _profile(text=BOMB),
         ("aliases expand it",), validate=True),
    Case("profile-without-name", "profiles", _profile(_delete("name")), ("name:",),
         validate=True),
    Case("profile-without-device", "profiles", _profile(_delete("device")), ("device:",),
         validate=True),
    Case("profile-unknown-key", "profiles", _profile(_set("budgets", {})),
         ("my-board.yaml:22: budgets:",), validate=True),
    Case("profile-unknown-key-wording", "profiles", _profile(_set("budgets", {})),
         ("my-board.yaml:", "budgets: unknown key"), absent=("Extra inputs",), validate=True),
    Case("profile-cpu-affinity-not-on-host", "profiles",
         lambda p: _with_onnx_benchmark(p, "my-board.yaml", _set("runtime", "cpu_affinity",
                                                                 [4096])),
         ("stage 1 (benchmark): --cpus asks for CPU 4096",), during_run=("00-source",)),
    Case("profile-unknown-budget", "profiles", _profile(_set("budget", "latency_p50_ms", 5)),
         ("budget.latency_p50_ms",), validate=True),
    Case("profile-arch-a-number", "profiles", _profile(_set("device", "arch", 64)),
         ("device.arch: Input should be a valid string",), validate=True),
    Case("profile-match-a-string", "profiles", _profile(_set("device", "match", "Pi")),
         ("device.match: Input should be a valid tuple",), validate=True),
    Case("profile-cores-zero", "profiles", _profile(_set("device", "cores", 0)),
         ("device.cores: Input should be greater than 0",), validate=True),
    Case("profile-threads-zero", "profiles", _profile(_set("runtime", "threads", 0)),
         ("runtime.threads: Input should be greater than 0",), validate=True),
    Case("profile-threads-text", "profiles", _profile(_set("runtime", "threads", "four")),
         ("runtime.threads", "valid integer"), validate=True),
    Case("profile-engines-empty", "profiles", _profile(_set("runtime", "engines", [])),
         ("runtime.engines", "at least 1 item"), validate=True),
    Case("profile-engines-repeated", "profiles",
         _profile(_set("runtime", "engines", ["litert", "litert"])),
         ("list each engine once",), validate=True),
    Case("profile-engines-a-string", "profiles", _profile(_set("runtime", "engines", "litert")),
         ("runtime.engines: Input should be a valid tuple",), validate=True),
    Case("profile-xnnpack-text", "profiles", _profile(_set("runtime", "xnnpack", "fast")),
         ("runtime.xnnpack: Input should be a valid boolean",), validate=True),
    Case("profile-cpu-affinity-negative", "profiles",
         _profile(_set("runtime", "cpu_affinity", [-1])),
         ("runtime.cpu_affinity[1]", "greater than or equal to 0"), validate=True),
    Case("profile-cpu-affinity-empty", "profiles", _profile(_set("runtime", "cpu_affinity", [])),
         ("runtime.cpu_affinity", "at least 1 item"), validate=True),
    Case("profile-delegate-options-without-delegate", "profiles",
         _profile(_set("runtime", "delegate_options", {"device": "usb:0"})),
         ("delegate_options needs a `delegate`",), validate=True),
    Case("profile-gpu-option-unknown", "profiles",
         _profile(lambda p: p["runtime"].update(engines=["litert"], delegate="gpu",
                                                delegate_options={"fast": True})),
         ("the LiteRT GPU accelerator has no option 'fast'",), validate=True),
    Case("profile-gpu-option-not-bool", "profiles",
         _profile(lambda p: p["runtime"].update(engines=["litert"], delegate="gpu",
                                                delegate_options={"enforce_f32": "yes"})),
         ("GPU options enforce_f32: give true or false",), validate=True),
    Case("profile-provider-a-string", "profiles",
         _profile(_set("runtime", "providers", ["CUDAExecutionProvider"])),
         ("runtime.providers[1]: Input should be a valid dictionary",), validate=True),
    Case("profile-provider-without-name", "profiles",
         _profile(_set("runtime", "providers", [{"options": {}}])),
         ("runtime.providers[1].name",), validate=True),
    Case("profile-provider-unknown-unchecked", "profiles",
         _profile(_set("runtime", "providers", [{"name": "FooExecutionProvider",
                                                 "check_options": False}])),
         ("unknown execution provider 'FooExecutionProvider'",), validate=True),
    Case("profile-provider-option-a-list", "profiles",
         _profile(_set("runtime", "providers", [{"name": "CUDAExecutionProvider",
                                                 "options": {"device_id": [0]}}])),
         ("runtime.providers[1].options.device_id",), validate=True),
    Case("profile-meter-unknown", "profiles", _profile(_set("power", {"meter": "wattmeter"})),
         ("power.meter: Input should be 'auto'",), validate=True),
    Case("profile-meter-command-without-command", "profiles",
         _profile(_set("power", {"meter": "command"})),
         ("meter: command needs `command:`",), validate=True),
    Case("profile-command-without-meter-command", "profiles",
         _profile(_set("power", {"command": "read-watts"})),
         ("`command:` is only used with meter: command",), validate=True),
    Case("profile-meter-interval-zero", "profiles", _profile(_set("power", {"interval_ms": 0})),
         ("power.interval_ms: Input should be greater than 0",), validate=True),
    Case("profile-idle-negative", "profiles", _profile(_set("power", {"idle_seconds": -1})),
         ("power.idle_seconds", "greater than or equal to 0"), validate=True),
    Case("profile-meter-command-prints-no-number", "profiles",
         _profile(_set("power", {"meter": "command", "command": "echo no-number-here"})),
         ("profile my-board: meter 'command' named but the meter command `echo` printed no "
          "number",)),
    Case("profile-meter-absent-here", "profiles",
         _profile(_set("power", {"meter": "tegrastats"})),
         ("profile my-board:", "tegrastats")),
    Case("profile-budget-negative", "profiles", _profile(_set("budget", "latency_p90_ms", -5)),
         ("budget.latency_p90_ms: Input should be greater than 0",), validate=True),
    Case("profile-budget-zero", "profiles", _profile(_set("budget", "model_size_mb", 0)),
         ("budget.model_size_mb: Input should be greater than 0",), validate=True),
    Case("profile-budget-nan", "profiles",
         _profile(text=yaml.safe_dump({**HOST_CPU, "name": "my-board"}).replace(
             "latency_p90_ms: 20", "latency_p90_ms: .nan")),
         ("budget.latency_p90_ms: Input should be a finite number",), validate=True),
    Case("profile-budget-text", "profiles", _profile(_set("budget", "latency_p90_ms", "fast")),
         ("budget.latency_p90_ms: Input should be a valid number",), validate=True),
    Case("profile-accuracy-drop-negative", "profiles",
         _profile(_set("budget", "accuracy_drop", -0.1)),
         ("budget.accuracy_drop", "greater than or equal to 0"), validate=True),
    Case("profile-unknown-tflite-mode", "profiles", _profile(_set("export", "tflite_mode", "int4")),
         ("export.tflite_mode",), validate=True),
    Case("profile-unknown-preset", "profiles", _profile(_set("export", "preset", "nope")),
         ("target my-board: export.preset: unknown preset 'nope'",), validate=True),
    Case("profile-name-empty", "profiles", _profile(_set("name", "")),
         ("name",), validate=True),

    # ---- SSH settings
    Case("ssh-port-out-of-range", "ssh", _target(ssh="pi@board:99999"),
         ("targets[1].ssh: 'pi@board:99999' is not an SSH address",), validate=True),
    Case("ssh-option-injection", "ssh", _target(ssh="-oProxyCommand=touch /tmp/x"),
         ("is not an SSH address",), validate=True),
    Case("ssh-identity-without-ssh", "ssh", _target(identity="id_ed25519"),
         ("identity only apply to a target with ssh",), validate=True),
    Case("ssh-accept-key-without-ssh", "ssh", _target(accept_new_host_key=True),
         ("accept_new_host_key only apply to a target with ssh",), validate=True),
    Case("ssh-timeout-zero", "ssh", _target(ssh="pi@board", connect_timeout_s=0),
         ("connect_timeout_s: Input should be greater than 0",), validate=True),
    Case("ssh-timeout-too-long", "ssh", _target(ssh="pi@board", connect_timeout_s=301),
         ("connect_timeout_s: Input should be less than or equal to 300",), validate=True),
    Case("ssh-identity-public-key", "ssh", _ssh_identity(PUBLIC_KEY),
         ("identity file", "id_test is a public key")),
    Case("ssh-identity-random-text", "ssh", _ssh_identity("hello, I am not a key\n"),
         ("id_test is not a private key",)),
    Case("ssh-identity-missing", "ssh", _ssh_identity(None),
         ("identity file", "id_test does not exist")),

    # ---- the CLI
    Case("cli-no-command", "cli", _argv(), ("the following arguments are required: command",)),
    Case("cli-unknown-command", "cli", _argv("frobnicate"), ("invalid choice: 'frobnicate'",)),
    Case("cli-run-without-file", "cli", _argv("run"),
         ("the following arguments are required: file",)),
    Case("cli-validate-without-file", "cli", _argv("validate"),
         ("the following arguments are required: file",)),
    Case("cli-validate-missing-file", "cli", _argv("validate", "nope.yaml"),
         ("nope.yaml: file not found",)),
    Case("cli-validate-a-directory", "cli", _argv("validate", "{project}"),
         ("directory",)),
    Case("cli-run-a-directory", "cli", _argv("run", "{project}", "--quiet"),
         ("is a directory",)),
    Case("cli-unknown-option", "cli", _argv("validate", "p.yaml", "--fast"),
         ("unrecognized arguments: --fast",)),
    Case("cli-schema-extra-argument", "cli", _argv("schema", "extra"),
         ("unrecognized arguments: extra",)),
    Case("cli-preflight-without-profile", "cli", _argv("preflight", "m.onnx"),
         ("the following arguments are required: --profile",)),
    Case("cli-preflight-yaml-file", "cli",
         _argv("preflight", "p.yaml", "--profile", "host-cpu", _file("p.yaml", "name: t\n")),
         ("p.yaml: the model must be an .onnx or a .tflite file",)),
    Case("cli-preflight-missing-model", "cli",
         _argv("preflight", "nope.onnx", "--profile", "host-cpu"),
         ("model file not found: nope.onnx",)),
    Case("cli-preflight-garbage-onnx", "cli",
         _argv("preflight", "g.onnx", "--profile", "coral-edgetpu",
               _file("g.onnx", bytes(range(256)) * 4)),
         ("g.onnx is not a valid ONNX model: it does not parse",)),
    Case("cli-preflight-garbage-tflite", "cli",
         _argv("preflight", "g.tflite", "--profile", "coral-edgetpu",
               _file("g.tflite", bytes(range(256)) * 4)),
         ("g.tflite is not a readable TFLite model",)),
    Case("cli-preflight-empty-onnx", "cli",
         _argv("preflight", "g.onnx", "--profile", "qcs6490", _file("g.onnx", b"")),
         ("g.onnx is not a valid ONNX model: it holds no graph",)),
    Case("cli-preflight-unknown-profile", "cli",
         _argv("preflight", "m.tflite", "--profile", "nope", _file("m.tflite", FP32_TFLITE)),
         ("unknown profile 'nope'",)),
    Case("cli-preflight-invalid-profile", "cli",
         _argv("preflight", "m.tflite", "--profile", "b.yaml", _file("m.tflite", FP32_TFLITE),
               _file("b.yaml", "name: b\ndevice: {arch: any}\nbudget: {latency_p90_ms: -1}\n")),
         ("b.yaml:3: budget.latency_p90_ms: Input should be greater than 0",)),
    Case("cli-preflight-onnx-for-litert-profile", "cli",
         _argv("preflight", "m.onnx", "--profile", "coral-edgetpu",
               _save_onnx("m.onnx")),
         ("profile 'coral-edgetpu' runs litert only", "give it a .tflite model")),
    Case("cli-preflight-tflite-for-onnx-profile", "cli",
         _argv("preflight", "m.tflite", "--profile", "qcs6490", _file("m.tflite", FP32_TFLITE)),
         ("profile 'qcs6490' runs onnxruntime only",)),
    Case("cli-preflight-python-not-runnable", "cli",
         _argv("preflight", "m.onnx", "--profile", "qcs6490", "--python", "p.yaml",
               _file("p.yaml", "name: t\n"),
               _save_onnx("m.onnx")),
         ("--python p.yaml: cannot run it",)),
    Case("cli-preflight-external-data-missing", "cli",
         _argv("preflight", "given.onnx", "--profile", "qcs6490",
               lambda p: _external_missing(p / "given.onnx")),
         ("given.data",)),
]


def _object_npz(project: Path) -> bytes:
    path = project / "objects.npz"
    np.savez(path, image=np.array([1, "a"], dtype=object))
    return path.read_bytes()


def _params():
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=case.xfail)] if case.xfail else []
        yield pytest.param(case, id=f"{case.category}:{case.id}", marks=marks)


def _main(argv: list, capsys) -> tuple[int, str, str]:
    """`compress ARGV` in this process: (exit code, stdout, stderr). argparse's own exit
    (code 2, its usage message) is part of the CLI."""
    capsys.readouterr()
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def check_clean_failure(code: int, out: str, err: str, expects: list, absent=(),
                        argparse_ok: bool = False) -> None:
    output = out + err
    assert code == 2, f"exit code {code}: {output}"
    if argparse_ok and err.startswith("usage:"):
        assert "error: " in err, output
    else:
        assert err.startswith("error: "), output
    assert "Traceback" not in output, output
    assert "internal error (a bug" not in output, output
    for expected in expects:
        assert expected in err, f"{expected!r} not in: {err}"
    for unwanted in absent:
        assert unwanted not in err, f"{unwanted!r} in: {err}"


def check_run_dir(project: Path, kept: tuple = ()) -> None:
    runs = project / "runs"
    half = sorted(str(p) for p in runs.rglob("*") if ".partial" in p.name or
                  p.name.startswith("report."))
    assert not half, f"half-written: {half}"
    stages = sorted(p.parent.name for p in runs.rglob("stage.json"))
    assert stages == sorted(kept), f"stages left: {stages}, expected {sorted(kept)}"


@pytest.mark.parametrize("case", _params())
def test_bad_input_in_process(project: Path, case: Case, capsys, monkeypatch, request):
    monkeypatch.chdir(project)
    from compress.runner import crash
    monkeypatch.setattr(crash, "_run_dir", None)  # a crash log of an earlier case's run
    if getattr(case.build, "needs_quickstart_onnx", False):
        import shutil
        shutil.copy(request.getfixturevalue("quickstart_onnx"), project / "digits.onnx")
        np.savez(project / "wrong.npz", image=np.zeros((4, 1, 9, 9), np.float32))
    built = case.build(project)
    argv = built if isinstance(built, list) else ["run", str(built), "--quiet"]
    expects = [e(built) if callable(e) else e for e in case.expect]
    if case.validate:  # first: a mistake validate misses must not cost a whole run here
        code, out, err = _main(["validate", str(built)], capsys)
        check_clean_failure(code, out, err, expects, case.absent)
    code, out, err = _main(argv, capsys)
    check_clean_failure(code, out, err, expects, case.absent, argparse_ok=case.category == "cli")
    check_run_dir(project, case.during_run)


def test_corpus_ids_are_distinct_and_spread():
    ids = [case.id for case in CASES]
    assert len(set(ids)) == len(ids), [i for i, n in Counter(ids).items() if n > 1]
    spread = Counter(case.category for case in CASES)
    assert set(spread) == {"yaml", "pipeline", "model", "onnx", "tflite", "data", "metric",
                           "stages", "targets", "profiles", "ssh", "cli"}, spread


def test_validate_never_imports_or_runs_user_code(project: Path, capsys, monkeypatch):
    """`compress validate` reads a pipeline and its profiles without importing the
    factory, loaders or metric they name, or running a meter command."""
    monkeypatch.chdir(project)
    marker = project / "ran"
    for module in ("evil_model", "evil_data", "evil_metric"):
        (project / f"{module}.py").write_text(
            f"open({str(marker)!r}, 'a').write('{module} ')\n\ndef f(*args, **kwargs):\n"
            f"    open({str(marker)!r}, 'a').write('{module}.f ')\n")
    profile = copy.deepcopy(HOST_CPU)
    profile.update(name="my-board", power={"meter": "command", "command": f"touch {marker}"})
    (project / "my-board.yaml").write_text(yaml.safe_dump(profile))
    data = pipeline_dict(targets=["my-board.yaml"])
    data["model"]["torch"] = {"factory": "evil_model:f"}
    data["data"] = {"calibration": "evil_data:f", "evaluation": "evil_data:f",
                    "metric": {"type": "custom", "function": "evil_metric:f"}}
    code, out, err = _main(["validate", str(write_pipeline(project, data))], capsys)
    assert code == 0, err
    assert not marker.exists(), marker.read_text()
