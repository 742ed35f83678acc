"""What the runner's option and inputs checks still accept (the refusals are cases of
tests/compress/runner/test_bad_input_runner.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runtimes.bench import main
from runtimes.bench.options import parser
from runtimes.feeds import OUTPUTS_KEY, read_npz, synthetic_feeds
from runtimes.session import TensorSpec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def matmul_onnx(tmp_path: Path) -> Path:
    import onnx
    from onnx import helper, numpy_helper
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", 1, (None, 4))],
                              [helper.make_tensor_value_info("y", 1, (None, 3))],
                              [numpy_helper.from_array(np.ones((4, 3), np.float32), "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    return tmp_path / "m.onnx"


def test_defaults_and_smallest_values_are_accepted():
    defaults = parser().parse_args(["m.onnx"])
    assert (defaults.threads, defaults.warmup, defaults.runs, defaults.seconds) == \
        (None, 10, 100, 0.0)   # threads None: the runtime's own default
    args = parser().parse_args(["m.onnx", "--threads", "1", "--warmup", "0", "--runs", "1",
                                "--seconds", "0.5", "--eval-batch", "1"])
    assert (args.threads, args.warmup, args.runs, args.seconds, args.eval_batch) == \
        (1, 0, 1, 0.5, 1)


def test_save_outputs_without_labels_writes_every_feed(matmul_onnx: Path, tmp_path: Path,
                                                       capsys, monkeypatch):
    monkeypatch.setenv("EDGE_COMPRESS_SYSFS_ROOT", str(tmp_path))  # no meter found
    np.savez(tmp_path / "i.npz", x=np.ones((3, 4), np.float32))
    code = main([str(matmul_onnx), "--inputs", str(tmp_path / "i.npz"), "--save-outputs",
                 str(tmp_path / "o.npz"), "--runs", "1", "--warmup", "0",
                 "--idle-seconds", "0", "--json"])
    assert code == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["metric"] is None
    saved = read_npz(str(tmp_path / "o.npz"))
    assert list(saved[OUTPUTS_KEY]) == ["y"] and len(saved) == 1 + 3


def test_an_empty_npz_reads_as_no_arrays(tmp_path: Path):
    """The pipeline's own check names the inputs it lacks; read_npz does not refuse it."""
    np.savez(tmp_path / "e.npz")
    assert read_npz(str(tmp_path / "e.npz")) == {}


@pytest.mark.parametrize("dtype", ["int16", "uint16", "uint32", "uint64", "bool"])
def test_random_inputs_for_every_numeric_type(dtype):
    feeds = synthetic_feeds([TensorSpec("x", (None, 2), dtype)])
    assert feeds["x"].dtype == np.dtype(dtype) and feeds["x"].shape == (1, 2)


def test_entry_point_help_is_not_an_error():
    result = subprocess.run([sys.executable, "-m", "runtimes", "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("usage: python -m runtimes bench")
