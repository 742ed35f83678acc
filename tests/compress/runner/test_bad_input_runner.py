"""The bad-input corpus of the device runner, `python -m runtimes bench MODEL ...`: its
contract is the pipeline's, exit code 2 with one `error: ` message naming the problem and
no traceback (exit 3 only for an accelerator that is not on this machine). Cases run
in-process through `runtimes.bench.main(argv)` (an exception escaping it is what a user
would see as a traceback with exit code 1); the `python -m runtimes` entry point itself
once as a subprocess.

Cases marked xfail(strict=True) are defects found here: the test asserts the promised
behaviour and fails until the runner is fixed.
"""
from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
FP32_TFLITE = REPO / "tests" / "fixtures" / "digits_cnn_fp32.tflite"


@dataclass(frozen=True)
class Case:
    id: str
    category: str                 # model, inputs, options, entry
    argv: tuple                   # after `python -m runtimes bench`; {d} is the folder
    expect: tuple                 # substrings of the message
    files: tuple = ()             # (name, writer(path)) made in the folder first
    absent: tuple = ()
    xfail: str | None = None


def _onnx(path: Path, shape=(1, 4), elem: int = 1, string_input: bool = False) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    if string_input:
        graph = helper.make_graph([helper.make_node("Identity", ["s"], ["y"])], "g",
                                  [helper.make_tensor_value_info("s", TensorProto.STRING, (1,))],
                                  [helper.make_tensor_value_info("y", TensorProto.STRING, (1,))])
    else:
        weights = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
        graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", elem, shape)],
                                  [helper.make_tensor_value_info("y", 1, (shape[0], 3))],
                                  [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


def _external_missing(path: Path) -> None:
    import onnx
    _onnx(path)
    onnx.save(onnx.load(str(path)), str(path), save_as_external_data=True,
              location="m.data", size_threshold=0)
    (path.parent / "m.data").unlink()


def _npz(**arrays) -> Callable[[Path], None]:
    return lambda path: np.savez(path, **arrays)


def _raw(content: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(content)


def _truncated(path: Path) -> None:
    np.savez(path, x=np.zeros((3, 4), np.float32))
    path.write_bytes(path.read_bytes()[:100])


def _objects(path: Path) -> None:
    np.savez(path, x=np.array([1, "a"], dtype=object))


def _npy(path: Path) -> None:
    with open(path, "wb") as file:  # a file object: np.save adds no .npy suffix
        np.save(file, X)


MODEL = ("m.onnx", _onnx)
X = np.random.default_rng(0).random((3, 4)).astype(np.float32)
QUICK = ("--runs", "2", "--warmup", "1", "--idle-seconds", "0")
COMMAND_METER = ("--meter", "command", "--meter-command", "echo 1")

CASES = [
    # ---- the model file
    Case("model-missing", "model", ("nope.onnx", *QUICK), ("model file not found: nope.onnx",)),
    Case("model-garbage-onnx", "model", ("g.onnx", *QUICK),
         ("onnxruntime cannot load g.onnx", "complete ONNX model"),
         files=(("g.onnx", _raw(bytes(range(256)) * 4)),)),
    Case("model-garbage-tflite", "model", ("g.tflite", *QUICK),
         ("LiteRT cannot load g.tflite", "complete .tflite model"),
         files=(("g.tflite", _raw(bytes(range(256)) * 4)),)),
    Case("model-truncated-tflite", "model", ("t.tflite", *QUICK), ("LiteRT cannot load t.tflite",),
         files=(("t.tflite", _raw(FP32_TFLITE.read_bytes()[:300])),)),
    Case("model-empty-onnx", "model", ("e.onnx", *QUICK), ("onnxruntime cannot load e.onnx",),
         files=(("e.onnx", _raw(b"")),)),
    Case("model-unknown-suffix", "model", ("m.pt", *QUICK),
         ("no runtime for 'm.pt': the file suffix must be one of .onnx, .tflite",),
         files=(("m.pt", _raw(b"weights")),)),
    Case("model-a-directory", "model", ("{d}", *QUICK), ("no runtime for",)),
    Case("model-external-data-missing", "model", ("m.onnx", *QUICK),
         ("cannot load m.onnx", "m.data"), files=(("m.onnx", _external_missing),)),
    Case("model-string-input", "model", ("s.onnx", *QUICK), ("'s'", "string"),
         files=(("s.onnx", lambda p: _onnx(p, string_input=True)),)),

    Case("model-fails-on-random-inputs", "model", ("d.onnx", *QUICK),
         ("the model fails on random inputs (dynamic dimensions set to 1)", "--inputs"),
         files=(("d.onnx", lambda p: _onnx(p, shape=("batch", "width"))),)),
    Case("engine-does-not-open-the-file", "model", ("m.onnx", "--engine", "litert", *QUICK),
         ("engine litert does not open 'm.onnx': it opens .tflite files",), files=(MODEL,)),
    Case("engine-unknown", "options", ("m.onnx", "--engine", "tensorrt", *QUICK),
         ("argument --engine: invalid choice: 'tensorrt'",), files=(MODEL,)),
    Case("openvino-garbage-xml", "model", ("g.xml", *QUICK), ("OpenVINO cannot load",),
         files=(("g.xml", _raw(b"<net><layers>")),)),
    Case("openvino-precision-unknown", "options",
         ("m.onnx", "--engine", "openvino", "--precision", "int4", *QUICK),
         ("argument --precision: invalid choice: 'int4'",), files=(MODEL,)),

    # ---- --inputs / --eval files
    Case("inputs-missing", "inputs", ("m.onnx", "--inputs", "nope.npz", *QUICK),
         ("inputs file not found: nope.npz",), files=(MODEL,)),
    Case("inputs-a-directory", "inputs", ("m.onnx", "--inputs", "{d}", *QUICK),
         ("inputs file not found",), files=(MODEL,)),
    Case("eval-missing", "inputs", ("m.onnx", "--eval", "nope.npz", *QUICK),
         ("inputs file not found: nope.npz",), files=(MODEL,)),
    Case("inputs-wrong-names", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("the inputs file has arrays ['z', 'w'], the model's inputs are ['x']",),
         files=(MODEL, ("i.npz", _npz(z=X, w=X))),),
    Case("inputs-wrong-shape", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("input 'x' has shape (1, 5) but the model expects (1, 4)",),
         files=(MODEL, ("i.npz", _npz(x=np.zeros((3, 5), np.float32))))),
    Case("inputs-wrong-dtype", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("input 'x' has dtype float64 but the model expects float32",),
         files=(MODEL, ("i.npz", _npz(x=np.zeros((3, 4))))),),
    Case("inputs-object-array", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("cannot read inputs file i.npz", "allow_pickle=False"),
         files=(MODEL, ("i.npz", _objects))),
    Case("inputs-feeds-incomplete", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("the inputs file lacks array x.0.0",),
         files=(MODEL, ("i.npz", _npz(__feeds__=np.array(["x"]),
                                      **{"x.1.0": np.zeros((1, 4), np.float32)})))),
    Case("inputs-labels-count", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("metric 'accuracy'", "3 rows", "1 labels"),
         files=(MODEL, ("i.npz", _npz(x=X, __labels__=np.array([1]))))),
    Case("inputs-reference-shape", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("metric 'fidelity': an output has shape (1, 3) where the reference has (1, 7)",),
         files=(MODEL, ("i.npz", _npz(x=X, __reference__=np.zeros((3, 7)))))),
    Case("inputs-truncated-zip", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("cannot read inputs file i.npz",), files=(MODEL, ("i.npz", _truncated))),
    Case("inputs-a-text-file", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("cannot read inputs file i.npz",), absent=("pickled",),
         files=(MODEL, ("i.npz", _raw(b"x: [1, 2, 3]\n")))),
    Case("inputs-feeds-bad-index", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("x.a.0",),
         files=(MODEL, ("i.npz", _npz(__feeds__=np.array(["x"]),
                                      **{"x.a.0": np.zeros((1, 4), np.float32)})))),
    Case("inputs-0d-array", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("input 'x'",), files=(MODEL, ("i.npz", _npz(x=np.float32(3))))),
    Case("inputs-no-arrays", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("i.npz",), files=(MODEL, ("i.npz", _npz()))),
    Case("inputs-zero-samples", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("i.npz",), files=(MODEL, ("i.npz", _npz(x=np.zeros((0, 4), np.float32))))),
    Case("metric-accuracy-without-labels", "inputs",
         ("m.onnx", "--inputs", "i.npz", "--metric", "accuracy", *QUICK),
         ("accuracy", "labels"), files=(MODEL, ("i.npz", _npz(x=X)))),
    Case("inputs-npy-file", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("cannot read inputs file i.npz", ".npy", "np.savez"), absent=("pickled",),
         files=(MODEL, ("i.npz", _npy))),
    Case("inputs-empty-file", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("cannot read inputs file i.npz: it is empty",), files=(MODEL, ("i.npz", _raw(b"")))),
    Case("inputs-feeds-three-indices", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("x.0.0.0", "NAME.FEED.PART"),
         files=(MODEL, ("i.npz", _npz(__feeds__=np.array(["x"]),
                                      **{"x.0.0.0": np.zeros((1, 4), np.float32)})))),
    Case("inputs-feeds-none", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("i.npz holds no feeds",), files=(MODEL, ("i.npz", _npz(__feeds__=np.array(["x"]))))),
    Case("inputs-0d-labels", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("array '__labels__'", "0-d"),
         files=(MODEL, ("i.npz", _npz(x=X, __labels__=np.array(7))))),
    Case("inputs-only-labels", "inputs", ("m.onnx", "--inputs", "i.npz", *QUICK),
         ("i.npz holds no input arrays",),
         files=(MODEL, ("i.npz", _npz(__labels__=np.array([0, 1, 2]))))),
    Case("eval-no-arrays", "inputs", ("m.onnx", "--eval", "e.npz", *QUICK),
         ("e.npz holds no input arrays",), files=(MODEL, ("e.npz", _npz()))),
    Case("metric-fidelity-without-reference", "inputs",
         ("m.onnx", "--inputs", "i.npz", "--metric", "fidelity", *QUICK),
         ("fidelity", "__reference__"), files=(MODEL, ("i.npz", _npz(x=X)))),
    Case("metric-without-inputs", "inputs", ("m.onnx", "--metric", "accuracy", *QUICK),
         ("--metric accuracy needs an inputs file", "--inputs"), files=(MODEL,)),
    Case("save-outputs-without-inputs", "inputs", ("m.onnx", "--save-outputs", "o.npz", *QUICK),
         ("--save-outputs needs an inputs file",), files=(MODEL,)),
    Case("save-outputs-a-folder", "inputs",
         ("m.onnx", "--inputs", "i.npz", "--save-outputs", "{d}", *QUICK),
         ("--save-outputs", "a folder"), files=(MODEL, ("i.npz", _npz(x=X)))),
    Case("save-outputs-folder-missing", "inputs",
         ("m.onnx", "--inputs", "i.npz", "--save-outputs", "/nonexistent/dir/out.npz", *QUICK),
         ("/nonexistent/dir/out.npz",),
         files=(MODEL, ("i.npz", _npz(x=X, __labels__=np.array([0, 1, 2]))))),

    # ---- options
    Case("provider-option-without-equals", "options",
         ("m.onnx", "--provider", "CUDAExecutionProvider", "--provider-option",
          "CUDAExecutionProvider:device_id", *QUICK),
         ("--provider-option 'CUDAExecutionProvider:device_id': write NAME:KEY=VALUE",),
         files=(MODEL,)),
    Case("provider-option-without-provider", "options",
         ("m.onnx", "--provider-option", "CUDAExecutionProvider:device_id=0", *QUICK),
         ("for a NAME given with --provider (none)",), files=(MODEL,)),
    Case("provider-option-garbage", "options",
         ("m.onnx", "--provider", "CUDAExecutionProvider", "--provider-option", "garbage",
          *QUICK), ("--provider-option 'garbage'",), files=(MODEL,)),
    Case("provider-option-empty-key", "options",
         ("m.onnx", "--provider", "CUDAExecutionProvider", "--provider-option",
          "CUDAExecutionProvider:=1", *QUICK), ("write NAME:KEY=VALUE",), files=(MODEL,)),
    Case("delegate-option-without-equals", "options",
         ("m.tflite", "--delegate-option", "device", *QUICK),
         ("--delegate-option 'device': write KEY=VALUE",),
         files=(("m.tflite", _raw(FP32_TFLITE.read_bytes())),)),
    Case("delegate-option-without-delegate", "options",
         ("m.tflite", "--delegate-option", "device=usb:0", *QUICK),
         ("--delegate-option needs a --delegate",),
         files=(("m.tflite", _raw(FP32_TFLITE.read_bytes())),)),
    Case("cpus-malformed", "options", ("m.onnx", "--cpus", "a-b", *QUICK),
         ("--cpus 'a-b' is not a CPU list",), files=(MODEL,)),
    Case("cpus-reversed-range", "options", ("m.onnx", "--cpus", "3-1", *QUICK),
         ("empty or negative range '3-1'",), files=(MODEL,)),
    Case("cpus-not-on-this-host", "options", ("m.onnx", "--cpus", "4096", *QUICK),
         ("--cpus asks for CPU 4096",), files=(MODEL,)),
    Case("cpus-empty", "options", ("m.onnx", "--cpus", "", *QUICK), ("--cpus",),
         files=(MODEL,)),
    Case("meter-command-with-other-meter", "options",
         ("m.onnx", "--meter", "rapl", "--meter-command", "echo 1", *QUICK),
         ("--meter-command is for meter 'command', not 'rapl'",), files=(MODEL,)),
    Case("meter-absent", "options", ("m.onnx", "--meter", "rapl", *QUICK),
         ("meter 'rapl' named but",), files=(MODEL,)),
    Case("meter-absent-with-engine-auto", "options",
         ("m.onnx", "--engine", "auto", "--precision", "bf16", "--meter", "rapl", *QUICK),
         ("meter 'rapl' named but",), absent=("unknown engine",), files=(MODEL,)),
    Case("meter-interval-negative", "options",
         ("m.onnx", *COMMAND_METER, "--meter-interval-ms", "-5", *QUICK),
         ("the meter interval must be positive, not -5 ms",), files=(MODEL,)),
    Case("idle-seconds-negative", "options", ("m.onnx", "--idle-seconds", "-1", "--runs", "2"),
         ("the idle seconds must be 0 or more, not -1",), files=(MODEL,)),
    Case("meter-interval-nan", "options",
         ("m.onnx", *COMMAND_METER, "--meter-interval-ms", "nan", *QUICK),
         ("the meter interval must be positive, not nan ms",), files=(MODEL,)),
    Case("idle-seconds-inf", "options", ("m.onnx", "--idle-seconds", "inf", "--runs", "2"),
         ("the idle seconds must be finite, not inf",), files=(MODEL,)),
    Case("runs-zero", "options", ("m.onnx", "--runs", "0", "--idle-seconds", "0"),
         ("--runs",), files=(MODEL,)),
    Case("runs-negative", "options", ("m.onnx", "--runs", "-5", "--idle-seconds", "0"),
         ("--runs",), files=(MODEL,)),
    Case("warmup-negative", "options", ("m.onnx", "--warmup", "-1", "--runs", "2",
                                        "--idle-seconds", "0"),
         ("--warmup",), files=(MODEL,)),
    Case("threads-zero", "options", ("m.onnx", "--threads", "0", *QUICK), ("--threads",),
         files=(MODEL,)),
    Case("threads-negative", "options", ("m.onnx", "--threads", "-3", *QUICK), ("--threads",),
         files=(MODEL,)),
    Case("seconds-negative", "options", ("m.onnx", "--seconds", "-1", *QUICK), ("--seconds",),
         files=(MODEL,)),
    Case("seconds-nan", "options", ("m.onnx", "--seconds", "nan", *QUICK), ("--seconds",),
         files=(MODEL,)),
    Case("seconds-inf", "options", ("m.onnx", "--seconds", "inf", *QUICK),
         ("argument --seconds: must be a finite number",), files=(MODEL,)),
    Case("eval-batch-zero", "options", ("m.onnx", "--eval-batch", "0", *QUICK),
         ("argument --eval-batch: must be 1 or more",), files=(MODEL,)),
    Case("runs-not-a-number", "options", ("m.onnx", "--runs", "many"),
         ("argument --runs: invalid int value: 'many'",), files=(MODEL,)),
    Case("metric-unknown", "options", ("m.onnx", "--metric", "top5"),
         ("argument --metric: invalid choice: 'top5'",), files=(MODEL,)),
    Case("meter-unknown", "options", ("m.onnx", "--meter", "wattmeter"),
         ("argument --meter: invalid choice: 'wattmeter'",), files=(MODEL,)),
    Case("model-argument-missing", "options", (),
         ("the following arguments are required: model",)),
]

def _params():
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=case.xfail)] if case.xfail else []
        yield pytest.param(case, id=f"{case.category}:{case.id}", marks=marks)


@pytest.mark.parametrize("case", _params())
def test_runner_bad_input(case: Case, tmp_path: Path, capsys, monkeypatch):
    from runtimes.bench import main
    monkeypatch.chdir(tmp_path)
    # no power meter here, whatever the machine has: --meter auto finds none
    (tmp_path / "sys").mkdir()
    monkeypatch.setenv("EDGE_COMPRESS_SYSFS_ROOT", str(tmp_path / "sys"))
    for name, write in case.files:
        write(tmp_path / name)
    argv = [a.format(d=tmp_path) for a in case.argv]
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2, f"exit code {code}: {out}{err}"
    assert err.startswith("error: ") or (err.startswith("usage:") and "error: " in err), err
    assert "Traceback" not in out + err
    for expected in case.expect:
        assert expected in err, f"{expected!r} not in: {err}"
    for unwanted in case.absent:
        assert unwanted not in err, f"{unwanted!r} in: {err}"


ENTRY_CASES = [
    pytest.param(["bench", "nope.onnx"], "model file not found", id="entry:bench-missing-model"),
    pytest.param(["bench", "g.onnx"], "onnxruntime cannot load g.onnx",
                 id="entry:bench-garbage-model"),
    pytest.param(["benchmark", "g.onnx"], "unknown command 'benchmark'",
                 id="entry:unknown-command"),
    pytest.param([], "bench", id="entry:no-command"),
    pytest.param(["lm-bench", "g.onnx"], "is not a language model this runner opens",
                 id="entry:lm-bench-not-a-folder"),
]
ENTRY_IDS = ["bench-missing-model", "bench-garbage-model", "unknown-command", "no-command",
             "lm-bench-not-a-folder"]


@pytest.mark.parametrize("args,expected", ENTRY_CASES)
def test_runner_entry_point(args, expected, tmp_path: Path):
    """`python -m runtimes ...` as a device user runs it (a fresh, torch-free process)."""
    (tmp_path / "g.onnx").write_bytes(bytes(range(256)) * 4)
    result = subprocess.run([sys.executable, "-m", "runtimes", *args], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert expected in result.stderr


def corpus_ids() -> list[str]:
    return [f"runner-{case.id}" for case in CASES] + [f"runner-{i}" for i in ENTRY_IDS]


def test_runner_corpus_ids_are_distinct():
    ids = corpus_ids()
    assert len(set(ids)) == len(ids), [i for i, n in Counter(ids).items() if n > 1]
