"""Issue 37's leftovers: the stage cache, the quantizer's litter, a search's early check,
prune's example inputs, and a runner killed by a signal as a failed variant.

- runs/.stages: an entry that is a link, or holds a link, a FIFO or a record naming a file
  outside it, is never followed: a miss said in a note, the stage made again and the
  entry replaced; where the cache's own folders are links the cache is not used at all,
  and nothing is written through them. The link's target is checked unchanged.
- quantize: onnxruntime writes `<model>-inferred.onnx` beside its input. The input is a
  hard link in the stage's own folder, so the previous stage's committed folder is left
  exactly as it was: not one entry made there (its mtime), and on a real full disk (a
  tmpfs) no truncated file left in it.
- a search with a `history` link planted in its run folder stops before any trial (exit
  2 naming it), the link's target untouched.
- prune's zero example inputs of a declared shape that cannot fit are refused before any
  is allocated: DataError naming the input, its shape, the bytes and the memory.
- a runner killed by a signal (a real child, really killed) is a failed variant on that
  target: every budget fails ("did not run: ..."), the run's verdict fails (exit 1), it is
  never recommended, the report's sentence says why with no number; the others are judged.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compress.core import stage_cache
from compress.core.artifacts import Artifact, Output, StageDir
from compress.core.stage_cache import ARTIFACT_FIELDS, RECORD, Untrusted, entry
from compress.errors import DataError, NoSpace
from tests.adversarial import planted
from tests.conftest import pipeline_dict, run_cli, write_pipeline

KEY = "ab" * 32
SLUG = "01-export.onnx"


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside the runs (what a planted link points to), checked unchanged."""
    yield from planted.outside(tmp_path)


def _make(runs: Path, run: str, data: bytes = b"an onnx model") -> list[Artifact]:
    """A stage made and committed in run `run`, shared into runs/.stages."""
    stage = StageDir(runs / run, SLUG, shared=runs / ".stages")
    made = stage.begin()
    (made / "model.onnx").write_bytes(data)
    return stage.commit(KEY, [Output(made / "model.onnx", "onnx", "fp32")], "export.onnx",
                        None, {"exporter": "legacy"})


def _reuse(runs: Path, run: str):
    return StageDir(runs / run, SLUG, shared=runs / ".stages").from_shared(KEY)


def _no_link_in(folder: Path) -> bool:
    return not any(p.is_symlink() or not (p.is_file() or p.is_dir()) for p in folder.rglob("*"))


def _planted_record(folder: Path, **artifact) -> None:
    record = json.loads((folder / RECORD).read_text())
    record["artifacts"][0].update(artifact)
    (folder / RECORD).unlink()
    (folder / RECORD).write_text(json.dumps(record))


def _plant(runs: Path, kind: str, outside: Path) -> Path:
    """A trusted entry made by a run, then turned into something compress does not make
    (copies it points to go beside `outside`, in `elsewhere`, itself checked unchanged)."""
    _make(runs, "first")
    found = entry(runs / ".stages", KEY)
    elsewhere = outside.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    if kind == "the entry is a link":   # to a copy elsewhere, its record and files intact
        shutil.copytree(found, elsewhere / "copy")
        shutil.rmtree(found)
        found.symlink_to(elsewhere / "copy", target_is_directory=True)
    elif kind == "its model is a link":   # to the user's file, the record made to match it
        (found / "model.onnx").unlink()
        (found / "model.onnx").symlink_to(outside / "precious.txt")
        from runtimes.digest import sha256_file
        _planted_record(found, sha256=sha256_file(str(outside / "precious.txt")))
    elif kind == "a folder in it holds a link":
        (found / "sub").mkdir()
        (found / "sub" / "weights.bin").symlink_to(outside / "precious.txt")
    elif kind == "a FIFO in it":
        os.mkfifo(found / "model.onnx.data")
    elif kind == "its record is a link":
        shutil.copy(found / RECORD, elsewhere / "record.json")
        (found / RECORD).unlink()
        (found / RECORD).symlink_to(elsewhere / "record.json")
    elif kind == "its record names a file outside it":
        _planted_record(found, path="../../../outside/precious.txt")
    elif kind == "its record is a FIFO":
        (found / RECORD).unlink()
        os.mkfifo(found / RECORD)
    elif kind == "a tree nested 40 deep":
        os.makedirs(found.joinpath(*["d"] * 40))
    return found


PLANTED = ("the entry is a link", "its model is a link", "a folder in it holds a link",
           "a FIFO in it", "its record is a link", "its record names a file outside it",
           "its record is a FIFO", "a tree nested 40 deep")


@pytest.mark.parametrize("kind", PLANTED)
def test_a_planted_cache_entry_is_a_miss_said_and_replaced(tmp_path, outside, kind):
    runs = tmp_path / "runs"
    found = _plant(runs, kind, outside)
    elsewhere = planted.snapshot(tmp_path / "elsewhere")
    started = time.monotonic()
    with pytest.raises(Untrusted) as caught:
        _reuse(runs, "second")
    assert time.monotonic() - started < 5   # a FIFO is never opened to block on
    message = str(caught.value)
    assert message.startswith(f"stage cache entry {found} ") and "\n" not in message
    assert "not used (never followed); the stage is made again and the entry replaced" \
        in message
    assert not (runs / "second" / SLUG).exists()   # nothing of it linked into the run
    made = _make(runs, "second", b"made again")   # the run makes it and shares its own
    assert not found.is_symlink() and _no_link_in(found)
    folder, record = stage_cache.lookup(runs / ".stages", KEY)
    assert record["artifacts"][0]["sha256"] == made[0].sha256
    assert (folder / "model.onnx").read_bytes() == b"made again"
    assert _reuse(runs, "third")[0].sha256 == made[0].sha256   # and it serves the next
    assert planted.snapshot(tmp_path / "elsewhere") == elsewhere


def _nest(folder: Path, depth: int) -> None:
    """`d/d/.../d` under `folder`, made one level at a time (os.makedirs recurses)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)


def _unnest(folder: Path) -> None:
    """Remove what _nest made, a level at a time (shutil.rmtree recurses, pytest's too)."""
    top = folder / "d"
    while (top / "d").exists():
        os.rename(top / "d", folder / "next")
        os.rmdir(top)
        os.rename(folder / "next", top)
    if top.exists():
        os.rmdir(top)


def test_a_tree_nested_past_pythons_recursion_is_a_miss_not_a_crash(tmp_path):
    runs = tmp_path / "runs"
    _make(runs, "first")
    found = entry(runs / ".stages", KEY)
    _nest(found, 1500)
    try:
        with pytest.raises(Untrusted, match="deeper than compress ever nests"):
            _reuse(runs, "second")
        assert _make(runs, "second", b"made again")   # committed; sharing is best effort
        assert (runs / "second" / SLUG / "model.onnx").read_bytes() == b"made again"
    finally:
        if found.is_dir():
            _unnest(found)


@pytest.mark.parametrize("where", [".stages", "shard"])
def test_a_cache_folder_that_is_a_link_is_not_used_nor_written_through(tmp_path, outside,
                                                                      where):
    runs = tmp_path / "runs"
    runs.mkdir()
    planted = runs / ".stages"
    if where == "shard":
        planted.mkdir()
        planted = planted / KEY[:2]
    planted.symlink_to(outside / "dir", target_is_directory=True)
    with pytest.raises(Untrusted) as caught:
        _reuse(runs, "first")
    assert str(caught.value).startswith(f"stage cache: {planted} is a symbolic link (to ")
    assert "the cache is not used" in str(caught.value)
    made = _make(runs, "first")   # committed in the run; nothing shared through the link
    assert (runs / "first" / SLUG / "model.onnx").is_file() and made
    assert planted.is_symlink() and not any((outside / "dir").iterdir())


def test_the_records_artifact_fields_are_the_artifacts():
    import dataclasses
    assert ARTIFACT_FIELDS == {f.name for f in dataclasses.fields(Artifact)}


_PATHS = st.sampled_from(["model.onnx", "../model.onnx", "/etc/passwd", "", ".", "a/../..",
                          "sub/model.onnx", "model.onnx\\..", "missing.onnx", "./model.onnx"])
_VALUES = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers()),
                    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=_PATHS, drop=st.sets(st.sampled_from(sorted(ARTIFACT_FIELDS)), max_size=2),
       extra=st.dictionaries(st.sampled_from(["key", "stage", "config", "artifacts", "x"]),
                             _VALUES, max_size=2))
def test_any_record_is_trusted_inside_its_entry_or_a_miss(tmp_path_factory, path, drop,
                                                          extra):
    runs = tmp_path_factory.mktemp("runs")
    _make(runs, "first")
    found = entry(runs / ".stages", KEY)
    record = json.loads((found / RECORD).read_text())
    artifact = {k: v for k, v in record["artifacts"][0].items() if k not in drop}
    record = {**record, "artifacts": [{**artifact, "path": path}], **extra}
    (found / RECORD).write_text(json.dumps(record))
    try:
        artifacts = _reuse(runs, "second")
    except Untrusted as exc:
        assert str(exc).startswith(f"stage cache entry {found} ")
        return
    if artifacts is not None:   # trusted: only what the entry holds, inside this run
        assert all(Path(a.path).parts[0] == SLUG and ".." not in Path(a.path).parts
                   and (runs / "second" / a.path).resolve().is_relative_to(runs / "second")
                   for a in artifacts)


# --- the quantizer writes only in its own stage's folder ----------------------------------

def _matmul_model(path: Path, rows: int, cols: int) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    weight = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cols])],
        [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def _quantize(run_dir: Path, rows: int, preprocess: bool):
    """The quantize stage on the previous stage's committed model, as a run calls it."""
    from compress.runner.progress import Progress
    from compress.stages.quantize import Quantize, run
    source = run_dir / SLUG / "model.onnx"
    stage = StageDir(run_dir, "02-quantize")
    ctx = SimpleNamespace(out_dir=stage.begin(), progress=Progress(quiet=True),
                          path=lambda artifact: source,
                          sample_feeds=lambda n: ([{"x": np.ones((1, rows), np.float32)}],
                                                  None))
    try:
        outputs = run(SimpleNamespace(format="onnx", id=SLUG, meta={}),
                      Quantize(scheme="int8-dynamic", preprocess=preprocess), ctx)
        return outputs, sorted(os.listdir(ctx.out_dir))
    finally:
        stage.abort()


@pytest.mark.parametrize("preprocess", [False, True])
def test_a_quantize_leaves_the_previous_stages_folder_as_it_was(tmp_path, preprocess):
    previous = tmp_path / "t" / SLUG
    previous.mkdir(parents=True)
    _matmul_model(previous / "model.onnx", 64, 64)
    (previous / "stage.json").write_text("{}")
    before = sorted(os.listdir(previous)), os.stat(previous).st_mtime_ns
    time.sleep(0.01)   # an entry made and removed there would move the folder's mtime
    outputs, made = _quantize(tmp_path / "t", 64, preprocess)
    assert (sorted(os.listdir(previous)), os.stat(previous).st_mtime_ns) == before
    assert outputs[0].path.name == "model.onnx"
    assert made == ["model.onnx"]   # its own link of the input gone before the commit


def test_a_quantize_on_a_full_disk_leaves_no_litter_in_the_previous_stage(tmp_path):
    with planted.tmpfs(tmp_path / "disk", "2m") as disk:
        previous = disk / "t" / SLUG
        previous.mkdir(parents=True)
        _matmul_model(previous / "model.onnx", 256, 1024)   # 1 MiB of weights
        with open(disk / "filler", "wb", buffering=0) as fill:   # ~200 kB left
            with contextlib.suppress(OSError):
                while os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize > 200_000:
                    fill.write(b"\0" * 4096)
        with pytest.raises(NoSpace, match="no space left on the disk of"):
            _quantize(disk / "t", 256, preprocess=False)
        assert os.listdir(previous) == ["model.onnx"]   # no `model-inferred.onnx` cut short
        assert sorted(os.listdir(disk / "t")) == [SLUG]   # nor the stage's own folder


# --- a search checks where it writes before any trial ----------------------------------------

def test_a_search_with_a_planted_history_link_stops_before_any_trial(tmp_path, outside):
    _matmul_model(tmp_path / "m.onnx", 16, 16)
    data = pipeline_dict(name="s", model={"onnx": "m.onnx"}, data={},
                         stages=[{"type": "quantize", "scheme": "int8-dynamic"},
                                 {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}],
                         search={"space": {"quantize.scheme": ["int8-dynamic", "fp16"]}})
    run_dir = tmp_path / "runs" / "s"
    run_dir.mkdir(parents=True)
    (run_dir / "history").symlink_to(outside / "dir", target_is_directory=True)
    ran = run_cli("run", write_pipeline(tmp_path, data), "--quiet", cwd=tmp_path)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert f"{run_dir / 'history'} is a symbolic link (to {outside / 'dir'})" in ran.stderr
    assert "Traceback" not in ran.stderr
    assert not [p.name for p in run_dir.iterdir()   # no trial, no report
                if p.name in ("trials", "search.db", "report.json", "report.md")]
    assert not (tmp_path / "runs" / ".stages").exists()


# --- prune's example inputs are bounded -----------------------------------------------------

def test_prunes_example_of_a_shape_that_cannot_fit_is_refused_before_allocation():
    torch = pytest.importorskip("torch")
    from compress.model.spec import TensorDecl
    from compress.stages.prune import Prune, run
    ctx = SimpleNamespace(inputs=(TensorDecl(name="image", shape=(100000, 100000, 100)),),
                          torch_model=lambda artifact: torch.nn.Linear(4, 4))
    with pytest.raises(DataError) as caught:
        run(SimpleNamespace(format="torch", id="00-source", meta={}),
            Prune(method="magnitude", sparsity=0.5), ctx)
    message = str(caught.value)
    assert message.startswith("model.inputs: input 'image' (shape [100000, 100000, 100] "
                              "float32): the zero example prune traces the model with takes ")
    assert "(4,000,000,000,000 bytes), more than half the " in message
    assert "of memory available here; check the shape in model.inputs" in message


@settings(max_examples=60, deadline=None, derandomize=True)
@given(shapes=st.lists(st.lists(st.one_of(st.none(), st.integers(1, 1 << 20)), max_size=4),
                       min_size=1, max_size=3),
       available=st.integers(1 << 10, 1 << 40))
def test_prunes_examples_are_refused_exactly_over_half_the_memory(shapes, available):
    import math

    import runtimes.input_bounds as bounds
    from compress.model.spec import TensorDecl
    from compress.stages.prune import _example_shapes
    decls = [TensorDecl(name=f"in{i}", shape=tuple(s)) for i, s in enumerate(shapes)]
    need = sum(4 * math.prod(1 if d is None else d for d in s) for s in shapes)
    real = bounds.available_bytes
    bounds.available_bytes = lambda: available
    try:
        if need > available // 2:
            with pytest.raises(DataError, match=r"more than half the .* of memory available"):
                _example_shapes(decls)
        else:
            assert _example_shapes(decls) == [tuple(1 if d is None else d for d in s)
                                              for s in shapes]
    finally:
        bounds.available_bytes = real


# --- a runner killed by a signal: the variant failed on that target -------------------------

def _killed_runner():
    """A real child (the runner's stand-in), really killed by SIGKILL, as the benchmark
    reaps it: the RunnerDied it makes, with the peak memory the kernel counted."""
    from compress.measure.exits import reap, runner_died
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(0.2)
    child.send_signal(signal.SIGKILL)
    peak = reap(child, 30)
    return runner_died(child.returncode, peak)


def _judged(died):
    """What a run makes of it: the record, the skipped pair, the verdicts, the exit,
    the recommendation, for one gated host-cpu target and a baseline that fits."""
    from compress.measure.exits import unmeasured
    from compress.report.decide import recommend, summary, variants_of
    from compress.runner.judging import passed, verdicts_of
    from compress.runner.produce import _not_measured
    from profiles import load_profile
    said, why = unmeasured(died)
    record = {"artifact": "02-quantize", "target": "host-cpu", "baseline": False,
              "comparison": False, "engine": "onnxruntime", "unmeasured": str(died), **why}
    skipped = [_not_measured(record)]
    artifacts = [SimpleNamespace(id="02-quantize", size_bytes=2 << 20, format="onnx")]
    targets = [("host-cpu", load_profile("host-cpu"))]
    verdicts = verdicts_of([], skipped, artifacts, targets)
    rows = [v.to_dict() for v in verdicts]
    rec = recommend("host-cpu", variants_of([], rows, {"02-quantize": 2 << 20}, {}))
    ok = passed([rec], {"host-cpu"}, strict=False)
    return said, skipped[0], verdicts, ok, rec, summary(rec, {})


def test_a_killed_runner_is_a_failed_variant_with_why_and_no_number():
    died = _killed_runner()
    assert died is not None and died.signal == "SIGKILL"
    said, pair, verdicts, ok, rec, sentence = _judged(died)
    assert said == "did not run" and pair["died"]["signal"] == "SIGKILL"
    assert pair["died"]["peak_memory_mb"] == died.peak_memory_mb > 0
    assert pair["unmeasured"] is False   # not an honest 'unmeasured': a failure
    assert {v.metric for v in verdicts} == {"latency_p90_ms", "peak_memory_mb",
                                            "model_size_mb", "energy_mj", "accuracy_drop"}
    assert all(v.status == "fail" and v.value is None and v.reason == f"did not run: {died}"
               for v in verdicts)
    assert ok is False   # a gated target: the run's exit 1
    assert rec["status"] == "nothing fits" and rec["artifact"] is None
    json.dumps(rec, allow_nan=False)   # no infinity in the report
    assert sentence == (f"host-cpu: nothing fits; closest: 02-quantize (did not run: {died})")
    assert "killed by SIGKILL: most likely the out-of-memory killer (peak memory " in sentence


def test_a_killed_variant_is_never_recommended_and_the_others_are_judged():
    from compress.report.decide import closest_miss, recommend, variants_of
    from profiles import load_profile
    from profiles.check import check, did_not_run_verdicts
    profile = load_profile("host-cpu")
    died = [v.to_dict() for v in did_not_run_verdicts(profile, "02-quantize", "host-cpu",
                                                      "the runner crashed in the runtime "
                                                      "(SIGSEGV)")]
    bench = {"artifact": "01-export.onnx", "target": "host-cpu", "baseline": True,
             "size_bytes": 1 << 20, "latency_ms": {"p90": 30.0}, "peak_memory_mb": 90.0,
             "measured_on": {"arch": "x86_64"}, "metric": None}
    slow = [v.to_dict() for v in check(bench, profile, "01-export.onnx", "host-cpu")]
    variants = variants_of([bench], died + slow, {"02-quantize": 1 << 19,
                                                  "01-export.onnx": 1 << 20}, {})
    miss = closest_miss(variants)   # the measured miss (30 ms of 20) is the closer one
    assert miss["artifact"] == "01-export.onnx" and miss["misses"][0]["over_by"] == 10.0
    bench["latency_ms"]["p90"] = 5.0
    fits = [v.to_dict() for v in check(bench, profile, "01-export.onnx", "host-cpu")]
    rec = recommend("host-cpu", variants_of([bench], died + fits, {"02-quantize": 1 << 19,
                                                                   "01-export.onnx": 1 << 20},
                                            {}))
    assert rec["artifact"] == "01-export.onnx"


# --- whole runs ---------------------------------------------------------------------------------

@pytest.mark.runs
def test_a_run_with_a_planted_cache_entry_makes_the_stage_and_says_so(project, outside):
    """A first run fills runs/.stages; its export's entry is then made to hold a link to
    the user's file (the record rewritten to match). A run under another name makes the
    stage itself, says why, replaces the entry, and passes."""
    path = write_pipeline(project, pipeline_dict())
    first = run_cli("run", path, "--quiet", cwd=project)
    assert first.returncode == 0, first.stderr
    record = next((project / "runs" / ".stages").glob(f"*/*/{RECORD}"))
    found = record.parent
    planted = json.loads(record.read_text())
    if planted["stage"] != "export.onnx":
        found = next(p.parent for p in (project / "runs" / ".stages").glob(f"*/*/{RECORD}")
                     if json.loads(p.read_text())["stage"] == "export.onnx")
    (found / "model.onnx").unlink()
    (found / "model.onnx").symlink_to(outside / "precious.txt")
    second = run_cli("run", path, "--name", "other", cwd=project)
    assert second.returncode == 0, second.stderr
    assert f"stage cache entry {found} holds model.onnx, a symbolic link (to " \
        f"{outside / 'precious.txt'})" in second.stderr
    assert "01-export.onnx: done in" in second.stderr   # made, not reused
    assert not (found / "model.onnx").is_symlink() and _no_link_in(found)
    assert not (project / "runs" / "other" / SLUG / "model.onnx").is_symlink()
