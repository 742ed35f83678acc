"""Memory and time stay bounded by what the input is, never by what it claims to be.

A search space is walked one combination at a time (never listed whole), and an
exhaustive search of more than its cap without max_trials is refused before any trial.
The protobuf walk that reads an ONNX file's layout stops at the first byte protobuf
would refuse, in work linear in the file's size. The runner refuses a thread count no
machine can use, an .npz whose arrays declare more than memory holds (before numpy
allocates them), and random inputs for a model whose declared input cannot fit; the
pipeline refuses those random inputs too.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from compress.config.pipeline import parse_pipeline
from compress.errors import ConfigError, ModelError
from compress.model.onnx_compat import read_graph
from compress.model.onnx_file import read_header
from compress.model.protobuf_wire import WireError, fields
from compress.runner.context import check_random_fits
from compress.runner.targets import resolve_targets
from compress.search import driver
from compress.search.space import EXHAUSTIVE_CAP, axes, size
from compress.search.trials import COMPLETE, Search, Trial
from runtimes import input_bounds
from runtimes.errors import RuntimeInputError
from runtimes.feeds import read_npz, synthetic_feeds
from runtimes.session import TensorSpec
from tests.conftest import child_env, pipeline_dict, run_cli, write_pipeline

REPO = Path(__file__).resolve().parents[2]
PROPERTY = settings(max_examples=150, deadline=None, derandomize=True)
HUGE = [100000, 100000, 100]          # 4e12 bytes of float32: no machine holds one call
MB = 1 << 20


def _peak(call) -> int:
    """Peak bytes Python allocated while `call` ran."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _model(path: Path, shape=(1, 4)) -> Path:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


# --- the protobuf walk ---------------------------------------------------------------------

@PROPERTY
@given(st.binary(max_size=4096))
def test_any_bytes_are_read_or_refused_with_a_model_error(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("wire") / "m.onnx"
    path.write_bytes(blob)
    for read in (read_header, read_graph):
        try:
            read(path)
        except ModelError:   # anything else escaping is a bug (exit 3)
            pass


@PROPERTY
@given(st.binary(max_size=2048))
def test_the_walk_refuses_only_what_protobuf_refuses(blob):
    """Bytes the walk refuses, protobuf refuses too: no real model is turned away."""
    try:
        list(fields(blob, 0, len(blob)))
    except WireError:
        with pytest.raises(Exception):
            onnx.ModelProto.FromString(blob)


@pytest.mark.parametrize("blob, what", [
    (b"\xff" * MB, "a varint longer than 10 bytes at byte 0"),
    (b"\x00" * 64, "field number 0"),
    (b"\x0e", "wire type 6"),
    (b"\x0f", "wire type 7"),
    (b"\x0c", "an end-group tag for field 1 outside any group"),
    (b"\x0b\x08\x01", "group 1 has no end-group tag"),
    (b"\x3a\xff\xff\xff\xff\x07", "runs past the end of its message"),
    (b"\x08", "the data ends inside a varint"),
])
def test_garbage_is_refused_at_the_byte_that_is_wrong(tmp_path, blob, what):
    path = tmp_path / "m.onnx"
    path.write_bytes(blob)
    with pytest.raises(ModelError, match="m.onnx is not a valid ONNX model") as caught:
        read_graph(path)
    assert what in str(caught.value) and "Fix: " in str(caught.value)


def test_groups_are_skipped_as_protobuf_skips_them(tmp_path):
    model = _model(tmp_path / "m.onnx").read_bytes()
    nested = bytes([0x63, 0x6b, 0x08, 0x01, 0x6c, 0x64])    # group 12 { group 13 { 1: 1 } }
    (tmp_path / "g.onnx").write_bytes(model + nested)
    assert read_header(tmp_path / "g.onnx").model.graph.node[0].op_type == "Relu"
    deep = bytes([0x63]) * 101 + bytes([0x64]) * 101         # past protobuf's limit of 100
    (tmp_path / "d.onnx").write_bytes(model + deep)
    with pytest.raises(ModelError, match="nested over 100 deep"):
        read_header(tmp_path / "d.onnx")


def test_a_3_gib_sparse_file_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "sparse.onnx"
    with open(path, "wb") as fh:
        fh.truncate(3 << 30)
    if os.stat(path).st_blocks * 512 > MB:
        pytest.skip("this filesystem does not keep sparse files")
    peak = _peak(lambda: pytest.raises(ModelError, read_graph, path))
    assert peak < 4 * MB
    with pytest.raises(ModelError, match="field number 0 .* at byte 0"):
        read_graph(path)


def test_a_length_past_the_file_is_refused_before_anything_is_copied(tmp_path):
    # a graph field that claims 3 GiB, in a file of a few bytes
    path = tmp_path / "m.onnx"
    path.write_bytes(b"\x3a\x80\x80\x80\x80\x0c" + b"\x0a\x01x")
    with pytest.raises(ModelError, match="field 7 of 3221225472 bytes runs past the end of "
                                         r"its message \(3 bytes left\) at byte 6"):
        read_header(path)


# --- search spaces -------------------------------------------------------------------------

# stage settings that take any whole number from 1: a space of up to 64^8 combinations
NUMERIC_KEYS = ("export.onnx.parity_samples", "quantize.samples", "benchmark.min_seconds",
                "quantize.bias_correction_samples", "benchmark.warmup", "benchmark.runs",
                "benchmark.rounds", "benchmark.eval_batch")


def _pipeline(space: dict, **search):
    data = pipeline_dict(name="s")
    data["search"] = {"space": space, **search}
    return parse_pipeline(data)


def _walk(pipeline, space, limit, start_each: bool) -> tuple[list, list]:
    """The proposals an exhaustive search makes (each started as a trial when
    `start_each`, else as if none could be made) and the notes it printed."""
    notes = []
    search = Search(pipeline, space, Path("unused"), {"note": notes.append})
    proposals = []
    for proposal in driver._exhaustive(search, limit):
        proposals.append(proposal.params)
        if start_each:
            search.trials.append(Trial(proposal.trial_id, proposal.params, COMPLETE))
    return proposals, notes


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=8), st.integers(1, 5))
@example([64] * 8, 1)
def test_an_exhaustive_search_makes_only_the_combinations_it_tries(widths, max_trials):
    space = {key: list(range(1, width + 1)) for key, width in zip(NUMERIC_KEYS, widths)}
    pipeline = _pipeline(space, strategy="exhaustive", max_trials=max_trials)
    resolved = axes(pipeline, resolve_targets(pipeline))
    made = []
    peak = _peak(lambda: made.extend(_walk(pipeline, resolved, max_trials, True)[0]))
    assert len(made) == min(max_trials, size(resolved))
    assert made[0] == {key: 1 for key in space}
    assert peak < 2 * MB       # a list of 64^8 dicts would not fit in any machine


def test_an_exhaustive_search_over_the_cap_is_refused_before_any_trial(tmp_path):
    space = {key: list(range(1, 33)) for key in NUMERIC_KEYS[:6]}     # 32^6
    for strategy in ("exhaustive", "auto"):
        pipeline = _pipeline(space, strategy=strategy)
        with pytest.raises(ConfigError, match=r"^search: the space has 1,073,741,824 "
                                              r"combinations; an exhaustive search tries at "
                                              r"most 10,000 .*max_trials.*optuna"):
            axes(pipeline, resolve_targets(pipeline))
    for bounded in ({"max_trials": 1}, {"strategy": "optuna"}):
        pipeline = _pipeline(space, **bounded)
        assert size(axes(pipeline, resolve_targets(pipeline))) == 32 ** 6
    data = pipeline_dict(name="s")
    data["search"] = {"space": space, "strategy": "exhaustive"}
    done = run_cli("validate", write_pipeline(tmp_path, data), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "1,073,741,824 combinations" in done.stderr + done.stdout


def test_a_walk_of_unmakeable_variants_stops_at_the_cap(monkeypatch):
    monkeypatch.setattr(driver, "EXHAUSTIVE_CAP", 50)
    space = {key: list(range(1, 11)) for key in NUMERIC_KEYS[:4]}     # 10^4
    pipeline = _pipeline(space, max_trials=3)
    made, notes = _walk(pipeline, axes(pipeline, resolve_targets(pipeline)), 3, False)
    assert len(made) == 50
    assert "stopped after 50 of 10,000 combinations" in notes[-1]
    assert EXHAUSTIVE_CAP == 10_000


# --- the runner ----------------------------------------------------------------------------

def _bench(folder: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtimes", "bench", *map(str, args),
                           "--runs", "1", "--warmup", "0", "--idle-seconds", "0",
                           "--meter", "none"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=child_env())


def test_the_runner_refuses_a_thread_count_no_machine_can_use(tmp_path):
    done = _bench(tmp_path, _model(tmp_path / "m.onnx"), "--threads", "100000")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: argument --threads: must be at most ")
    assert "not 100000" in done.stderr


def _forged_npz(path: Path, shape=(1000000, 1000000), name="x") -> Path:
    """An .npz whose one array's header declares `shape` float32 over 16 bytes of data."""
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, np.float32))
    header["shape"] = shape
    member = bytearray()   # the magic string, then the header
    np.lib.format.write_array_header_1_0(_Sink(member), header)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{name}.npy", bytes(member) + bytes(16))
    return path


class _Sink:
    def __init__(self, buffer: bytearray):
        self.buffer = buffer

    def write(self, data: bytes) -> None:
        self.buffer += data


def _refused_within(path: Path, peak: int, match: str) -> None:
    """read_npz refuses `path` with a RuntimeInputError matching `match`, having
    allocated under `peak` bytes on the way."""
    caught = []
    assert _peak(lambda: caught.append(pytest.raises(RuntimeInputError, read_npz,
                                                     str(path)))) < peak
    caught[0].match(match)


def test_a_forged_npz_header_is_refused_before_numpy_allocates_it(tmp_path):
    path = _forged_npz(tmp_path / "i.npz")
    _refused_within(path, 4 * MB, r"array 'x' declares shape \(1000000, 1000000\) float32 "
                                  r"\(3,725.3 GiB\) but holds 16 bytes: the file is damaged "
                                  r"or forged")
    done = _bench(tmp_path, _model(tmp_path / "m.onnx"), "--inputs", path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: cannot read inputs file") and "forged" in done.stderr


def test_a_zip_bomb_over_the_memory_available_is_refused_before_it_is_read(tmp_path,
                                                                           monkeypatch):
    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, x=np.zeros((8, MB), np.uint8))   # 8 MiB of zeros in ~8 KiB
    assert path.stat().st_size < 100 * 1024
    monkeypatch.setattr(input_bounds, "available_bytes", lambda: 4 * MB)
    _refused_within(path, 2 * MB, r"bomb.npz \(1 arrays\) takes 8.0 MiB \(8,388,608 bytes\), "
                                  r"more than half the 4.0 MiB of memory available")


def test_the_runner_refuses_random_inputs_that_cannot_fit(tmp_path):
    spec = TensorSpec("x", tuple(HUGE), "float32")
    with pytest.raises(RuntimeInputError, match=r"input 'x' of shape \(100000, 100000, 100\) "
                                                r"float32: random values for it takes"):
        synthetic_feeds([spec])
    done = _bench(tmp_path, _model(tmp_path / "m.onnx", HUGE))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "input 'x' of shape (100000, 100000, 100)" in done.stderr
    assert "of memory available here" in done.stderr


# --- the pipeline's random inputs ----------------------------------------------------------

def test_the_pipeline_refuses_random_inputs_that_cannot_fit(monkeypatch):
    from compress.model.spec import TensorDecl
    with pytest.raises(ModelError, match=r"input 'x' declares shape \[100000, 100000, 100\] "
                                         r"float32: 3,725.3 GiB \(4,000,000,000,000 bytes\) "
                                         r"a call.*of memory available here"):
        check_random_fits([TensorDecl(name="x", shape=tuple(HUGE), dtype="float32")], 1)
    small = [TensorDecl(name="x", shape=(1, 256, 1024), dtype="float32")]   # 1 MiB a call
    check_random_fits(small, 32)
    monkeypatch.setattr(input_bounds, "available_bytes", lambda: 16 * MB)
    with pytest.raises(ModelError, match=r"32 random feeds of input 'x' .* more than half "
                                         r"the 16.0 MiB of memory available"):
        check_random_fits(small, 32)


def test_a_pipeline_on_a_model_declaring_a_huge_input_says_so(tmp_path):
    _model(tmp_path / "m.onnx", HUGE)
    data = pipeline_dict(name="huge", model={"onnx": "m.onnx"}, data={},
                         stages=[{"type": "quantize", "scheme": "int8-dynamic"}], targets=[])
    done = run_cli("run", write_pipeline(tmp_path, data), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "input 'x' declares shape [100000, 100000, 100]" in done.stderr
    assert "of memory available here" in done.stderr
