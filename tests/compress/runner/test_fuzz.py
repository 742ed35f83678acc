"""Property-based fuzzing of everything a user hands the pipeline, with hypothesis.

The property is the product's promise: every input ends in success or in the product's
own error type (CompressError: exit code 2 through the CLI; ProfileError for a profile,
which the pipeline turns into a ConfigError), never any other exception. Nothing here runs
a model: pipeline documents are validated (schema, stage graph, profiles, target
defaults), YAML text is loaded, data is turned into feeds, and the CLI only gets commands
that do no real work. Settings are bounded and derandomized, so CI sees the same examples
every time (~30 s on 2 cores).

Counterexamples hypothesis found (and the fixes they led to) are pinned as explicit
`@example(...)` cases, so they are tried first on every run.
"""
from __future__ import annotations

import contextlib
import copy
import io
import math
import os
import string
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from compress.runner.targets import apply_target_defaults, resolve_targets
from compress.config.pipeline import load_pipeline, parse_pipeline
from compress.model.spec import TensorDecl
from compress.data.forms import to_feeds
from compress.errors import CompressError, DataError
from profiles import ProfileError, load_profile

REPO = Path(__file__).resolve().parents[3]
PROFILE_FILES = sorted((REPO / "profiles").glob("*.yaml"))
PROFILE_NAMES = [p.stem for p in PROFILE_FILES]

# 1500 examples a property, about 100 s in all: `make test-runs`
pytestmark = pytest.mark.runs

FUZZ = settings(max_examples=1500, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


# --- (a) pipeline documents: valid ones from the schema's pieces, then mutated ---------

NAMES = st.text(string.ascii_letters + string.digits + "_.-", min_size=1, max_size=20).filter(
    lambda s: s not in (".", ".."))
TORCH_MODEL = st.fixed_dictionaries({
    "torch": st.fixed_dictionaries({"factory": st.just("model:build")},
                                   optional={"checkpoint": st.just("digits_cnn.pt"),
                                             "kwargs": st.just({"width": 8})}),
    "inputs": st.just([{"name": "image", "shape": [1, 1, 8, 8], "dtype": "float32"}])})
ONNX_MODEL = st.fixed_dictionaries({"onnx": st.just("model.onnx")}, optional={
    "inputs": st.just([{"name": "x", "shape": [None, 4]}]), "dynamic_batch": st.booleans()})
TFLITE_MODEL = st.fixed_dictionaries({"tflite": st.just("model.tflite")})
SOURCE = st.sampled_from(["data:calibration", "calib.npz", {"loader": "data:load",
                                                             "kwargs": {"n": 3}},
                          {"npz": "eval.npz"}])
METRIC = st.one_of(
    st.just({"type": "accuracy"}),
    st.fixed_dictionaries({"type": st.just("fidelity")},
                          optional={"primary": st.sampled_from(["top1_agreement", "cosine"])}),
    st.fixed_dictionaries({"type": st.just("custom"), "function": st.just("m:score")},
                          optional={"higher_is_better": st.booleans()}))
DATA = st.fixed_dictionaries({}, optional={"calibration": SOURCE, "evaluation": SOURCE,
                                           "train": SOURCE, "metric": METRIC})
QUANTIZE = st.fixed_dictionaries(
    {"type": st.just("quantize"),
     "scheme": st.sampled_from(["int8-static", "int8-dynamic", "int4-weight-only", "fp16"])},
    optional={"calibration": st.sampled_from(["minmax", "entropy", "percentile"]),
              "per_channel": st.booleans(), "samples": st.integers(1, 512),
              "preset": st.sampled_from(["none", "x86-avx2", "arm64", "jetson-gpu"]),
              "max_drop": st.one_of(st.floats(0, 1), st.just("targets")),
              "block_size": st.sampled_from([16, 32, 64, 24]),
              "activations": st.sampled_from(["uint8", "int8", "uint16"])})
EXPORT_ONNX = st.fixed_dictionaries({"type": st.just("export.onnx")}, optional={
    "opset": st.integers(13, 23), "exporter": st.sampled_from(["dynamo", "legacy"])})
EXPORT_TFLITE = st.fixed_dictionaries({"type": st.just("export.tflite")}, optional={
    "mode": st.sampled_from(["fp32", "fp16", "dynamic-int8", "int8"]),
    "input": st.just("source"), "preset": st.sampled_from(["arm64", "edgetpu", "none"])})
PRUNE = st.fixed_dictionaries({"type": st.just("prune"),
                               "method": st.sampled_from(["channel", "magnitude"]),
                               "sparsity": st.floats(0, 0.95)})
DISTILL = st.fixed_dictionaries({"type": st.just("distill")}, optional={
    "alpha": st.floats(0, 1), "temperature": st.floats(0.5, 8), "train": st.just({"epochs": 1})})
BENCHMARK = st.fixed_dictionaries({"type": st.just("benchmark")}, optional={
    "runs": st.integers(1, 50), "warmup": st.integers(0, 5), "rounds": st.integers(1, 3)})
STAGES = st.tuples(st.lists(st.one_of(PRUNE, DISTILL, EXPORT_ONNX, QUANTIZE, EXPORT_TFLITE),
                            max_size=4),
                   st.booleans()).map(lambda p: p[0] + ([{"type": "benchmark"}] if p[1] else []))
TARGET = st.one_of(st.sampled_from(PROFILE_NAMES),
                   st.fixed_dictionaries({"profile": st.sampled_from(PROFILE_NAMES)},
                                         optional={"gate": st.booleans(), "name": NAMES,
                                                   "ssh": st.just("pi@board:2222"),
                                                   "python": st.just("/usr/bin/python3")}))
PIPELINE = st.fixed_dictionaries(
    {"name": NAMES, "model": st.one_of(TORCH_MODEL, ONNX_MODEL, TFLITE_MODEL), "stages": STAGES},
    optional={"data": DATA, "targets": st.lists(TARGET, max_size=3),
              "output": st.just("runs"), "seed": st.integers(0, 2**32 - 1)})

JUNK = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
              st.binary(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12)


def _paths(doc, prefix=()):
    """Every (path, container) in a nested document."""
    yield prefix, doc
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield from _paths(value, prefix + (index,))


@st.composite
def mutated(draw, documents):
    """A document with a few random mutations: keys deleted, unknown keys inserted, values
    swapped for values of another type, out-of-range numbers, strings, nested junk."""
    doc = copy.deepcopy(draw(documents))
    for _ in range(draw(st.integers(0, 4))):
        containers = [(p, c) for p, c in _paths(doc) if isinstance(c, (dict, list)) and c]
        if not containers:
            break
        _, node = draw(st.sampled_from(containers))
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = draw(st.sampled_from(keys))
        action = draw(st.sampled_from(["delete", "insert", "swap", "number", "text", "junk"]))
        if action == "delete":
            del node[key]
        elif action == "insert" and isinstance(node, dict):
            node[draw(st.text(max_size=12))] = draw(JUNK)
        elif action == "number":
            node[key] = draw(st.one_of(st.integers(-10**20, 10**20), st.floats(),
                                       st.sampled_from([0, -1, 2**32, 1e308, -0.0])))
        elif action == "text":
            node[key] = draw(st.text(max_size=40))
        else:  # swap / junk (and insert into a list)
            node[key] = draw(JUNK)
    return doc


def _validate(doc) -> None:
    pipeline = parse_pipeline(doc)
    apply_target_defaults(pipeline, resolve_targets(pipeline).pairs)


@FUZZ
@given(doc=st.one_of(PIPELINE, mutated(PIPELINE)))
@example(doc={"name": "t", "model": {"onnx": "m.onnx"}, "stages": [{"type": "benchmark"}],
              "targets": [{"profile": "host-cpu", "name": "a"},
                          {"profile": "host-cpu", "name": "a"}]})
@example(doc={"name": "t", "model": {"onnx": "m.onnx"}, "stages": [{"type": "quantize",
              "scheme": "int8-static", "max_drop": "targets"}], "targets": ["rpi4"]})
def test_pipeline_documents_validate_or_raise_config_errors(doc):
    try:
        _validate(doc)
    except CompressError:
        pass


@FUZZ
@given(doc=PIPELINE)
def test_generated_valid_documents_round_trip_through_yaml(doc, tmp_path):
    """A document validates from YAML exactly as from Python (same error or none)."""
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    outcomes = []
    for load in (lambda: parse_pipeline(doc), lambda: load_pipeline(path)):
        try:
            load()
            outcomes.append(None)
        except CompressError as exc:
            outcomes.append(str(exc).split(": ")[-1])
    assert outcomes[0] == outcomes[1]


# --- (b) YAML text: random bytes, random text, YAML with anchors, aliases and tags -----

YAML_PIECES = st.sampled_from([
    "name: t\n", "model: {onnx: m.onnx}\n", "stages: [{type: benchmark}]\n", "a: &x [1, 2]\n",
    "b: *x\n", "c: *nope\n", "d: !!binary aGk=\n", "e: !!python/name:os.system\n",
    "f: !custom 3\n", "g: !!set {a, b}\n", "h: !!omap [a: 1]\n", "<<: *x\n", "? [a]\n: b\n",
    "name: u\n", "- 1\n", "  x: 1\n", "\t", "%YAML 1.1\n---\n", "--- |\n  text\n", "...\n",
    "i: &r [*r]\n", "j: 0x1F\n", "k: .nan\n", "l: 1e999\n", "m: 2001-01-01\n", "'n\n",
    "o: [" * 5, "]" * 5 + "\n", "p: {q: &y {r: 1}, s: *y}\n", "\ufeffname: t\n", "t: \x85\n",
    "u: \"\\x00\"\n", "v: ~\n", "w: [&z a, *z, *z]\n"])


CONTENT = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.lists(YAML_PIECES, max_size=12).map(lambda parts: "".join(parts).encode()),
    st.lists(YAML_PIECES, max_size=8).map(lambda parts: "".join(parts).encode("utf-16")),
    st.lists(YAML_PIECES, max_size=8).map(lambda parts: "".join(parts).encode("latin-1",
                                                                             "replace")))


def _load_yaml_file(content: bytes, folder: Path) -> None:
    path = folder / "pipeline.yaml"
    path.write_bytes(content)
    try:
        load_pipeline(path)
    except CompressError:
        pass


@FUZZ
@given(content=CONTENT)
@example(content=b"name: t\x01\n")  # a control character (PyYAML's reader refuses it)
@example(content=b"name: t\n# \x1b[31mred\x1b[0m\n")  # a terminal escape in a comment
def test_yaml_text_loads_or_raises_config_error(content, tmp_path):
    _load_yaml_file(content, tmp_path)


# --- (c) profile files: the built-in profiles, mutated ----------------------------------

BUILTIN_PROFILES = st.sampled_from([yaml.safe_load(p.read_text()) for p in PROFILE_FILES])


@FUZZ
@given(profile=mutated(BUILTIN_PROFILES),
       as_text=st.sampled_from(["yaml", "flow", "truncated"]))
@example(profile={"name": "b", "device": {"arch": "any"},
                  "runtime": {"providers": [{"name": "CUDAExecutionProvider",
                                             "options": {"device_id": None}}]}},
         as_text="yaml")
def test_profile_files_load_or_raise_profile_errors(profile, as_text, tmp_path):
    path = tmp_path / "board.yaml"
    text = yaml.safe_dump(profile, default_flow_style=as_text == "flow", allow_unicode=True)
    if as_text == "truncated":
        text = text[: len(text) // 2]
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_profile(str(path))
    except ProfileError:
        pass


@FUZZ
@given(profile=mutated(BUILTIN_PROFILES))
def test_a_bad_profile_is_a_config_error_in_a_pipeline(profile, tmp_path):
    path = tmp_path / "board.yaml"
    path.write_text(yaml.safe_dump(profile))
    doc = {"name": "t", "model": {"onnx": "m.onnx"},
           "stages": [{"type": "quantize", "scheme": "int8-static"}, {"type": "export.tflite",
                                                                      "input": "source"}],
           "targets": [str(path)]}
    try:
        pipeline = parse_pipeline(doc)
        apply_target_defaults(pipeline, resolve_targets(pipeline).pairs)
    except CompressError:
        pass


# --- (d) data loader results -> feeds ----------------------------------------------------

DTYPES = ["float32", "float64", "float16", "int64", "int32", "int8", "uint8", "bool",
          "complex64", "<U3", "object", "datetime64[s]"]
SHAPES = st.lists(st.integers(0, 4), max_size=4).map(tuple)


@st.composite
def arrays(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(SHAPES)
    size = int(np.prod(shape)) if shape else 1
    if dtype == "object":
        flat = np.array([draw(st.one_of(st.none(), st.integers(), st.text(max_size=3)))
                         for _ in range(size)] or [None], dtype=object)[:size]
    elif dtype.startswith("<U"):
        flat = np.array(["abc"] * size, dtype=dtype)
    elif dtype.startswith("datetime"):
        flat = np.zeros(size, dtype=dtype)
    else:
        values = draw(st.lists(st.sampled_from([0, 1, -1, 0.5, 1e30, float("nan"),
                                                float("inf")]), min_size=size, max_size=size))
        with np.errstate(all="ignore"):
            flat = np.array(values, dtype="float64").astype(dtype)
    return flat.reshape(shape)


LEAVES = st.one_of(arrays(), st.none(), st.integers(-5, 5), st.floats(), st.text(max_size=5),
                   st.binary(max_size=5))
INPUT_NAMES = st.sampled_from(["x", "y", "labels", "image", ""])


def _data_of(inner):
    return st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(INPUT_NAMES, inner, max_size=3),
        st.lists(inner, max_size=3).map(lambda items: (item for item in items)),
    )


RAW = st.recursive(LEAVES, _data_of, max_leaves=10)
DECLS = st.lists(st.builds(
    TensorDecl, name=st.sampled_from(["x", "y", "image"]),
    shape=st.lists(st.one_of(st.none(), st.integers(1, 3)), max_size=3).map(tuple),
    dtype=st.sampled_from(["float32", "int64", "bool", "float16", "uint8"])),
    min_size=1, max_size=2, unique_by=lambda d: d.name).map(tuple)

X2 = (TensorDecl(name="x", shape=(1, 2)),)
SAMPLES = np.zeros((3, 2), np.float32)   # 3 samples of X2's input


def _feeds_or_data_error(raw, decls, dynamic_batch) -> None:
    with np.errstate(all="ignore"):
        try:
            feeds, labels, _ = to_feeds(raw, decls, dynamic_batch, "data.calibration")
        except DataError:
            return
    names = {d.name for d in decls}
    for feed in feeds:  # what comes out is what the model takes: names, shapes, finite
        assert set(feed) == names
        for decl in decls:
            array = feed[decl.name]
            assert array.dtype == np.dtype(decl.dtype)
            assert len(array.shape) == len(decl.shape)
            if array.dtype.kind == "f":
                assert np.isfinite(array).all()
    assert labels is None or len(labels) == len(feeds)


@FUZZ
@given(raw=RAW, decls=DECLS, dynamic_batch=st.booleans())
@example(raw={"x": SAMPLES, "labels": 3}, decls=X2, dynamic_batch=False)
@example(raw=(SAMPLES, 5), decls=X2, dynamic_batch=False)
@example(raw={"x": SAMPLES, "labels": np.array(7)}, decls=X2, dynamic_batch=False)
@example(raw=(np.array([], np.float32), np.array(0.0, np.float32)),
         decls=(TensorDecl(name="x", shape=()),), dynamic_batch=False)
@example(raw=[{"x": [1.0, 2.0, 3.0, 4.0], "labels": 7}],
         decls=(TensorDecl(name="x", shape=(2,)),), dynamic_batch=False)
@example(raw=[{"x": [[1.0, 2.0], [3.0]]}], decls=(TensorDecl(name="x", shape=(2,)),),
         dynamic_batch=False)
@example(raw=[{"x": ["a", b"\x80"]}], decls=(TensorDecl(name="x", shape=(2,)),),
         dynamic_batch=False)
def test_loader_results_become_feeds_or_data_errors(raw, decls, dynamic_batch):
    # the explicit examples: scalar labels beside samples, ragged and mixed lists
    _feeds_or_data_error(raw, decls, dynamic_batch)


# --- (e) the CLI: commands that do no real work ------------------------------------------

JUNK_FILES = {
    "empty.yaml": b"", "list.yaml": b"- 1\n- 2\n", "text.yaml": b"hello\n",
    "bad.yaml": b"name: [t\n", "latin1.yaml": "name: caf\xe9\n".encode("latin-1"),
    "utf16.yaml": "name: t\n".encode("utf-16"), "binary.yaml": bytes(range(256)),
    "nomodel.yaml": b"name: t\nstages: [{type: benchmark}]\n",
    "unknown.yaml": b"name: t\nmodel: {onnx: m.onnx}\nstages: [{type: sparsify}]\n",
    "missing-onnx.yaml": b"name: t\nmodel: {onnx: none.onnx}\nstages: [{type: benchmark}]\n",
    "garbage.onnx": bytes(range(256)) * 2, "garbage.tflite": bytes(range(256)) * 2,
    "empty.onnx": b"", "notes.txt": b"just text\n",
    "profile.yaml": b"name: b\ndevice: {arch: any}\nbudget: {latency_p90_ms: -1}\n",
}
COMMANDS = st.sampled_from(["run", "validate", "schema", "profiles", "preflight", "bench", ""])
ARGS = st.sampled_from(sorted(JUNK_FILES) + [
    "--json", "--force", "--strict", "--quiet", "--profile", "host-cpu", "coral-edgetpu",
    "qcs6490", "profile.yaml", "nope", "--python", "/bin/false", "--help-me", "-x", "",
    ".", "..", "/", "no-such-file.yaml", "a\nb", "é", "-", "--"])


@pytest.fixture(scope="module")
def junk_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cli-junk")
    for name, content in JUNK_FILES.items():
        (folder / name).write_bytes(content)
    return folder


def _cli(argv: list, folder: Path) -> None:
    from compress import cli
    old = os.getcwd()
    os.chdir(folder)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(argv)
            except SystemExit as exc:  # argparse: usage errors are 2, --help is 0
                code = exc.code
    finally:
        os.chdir(old)
    assert code in (0, 1, 2), (argv, code, err.getvalue())
    assert "Traceback" not in err.getvalue()
    if code == 2 and not err.getvalue().startswith("usage:"):
        assert err.getvalue().startswith("error: "), err.getvalue()
    assert not (folder / "runs").exists()


@FUZZ
@given(command=COMMANDS, args=st.lists(ARGS, max_size=5))
@example(command="run", args=["latin1.yaml"])  # files that are no UTF-8 text
@example(command="run", args=["utf16.yaml"])
@example(command="run", args=["binary.yaml"])
@example(command="run", args=["garbage.onnx"])
@example(command="run", args=["/bin/false"])
def test_cli_exits_0_1_or_2_on_junk(command, args, junk_dir):
    _cli(([command] if command else []) + args, junk_dir)


def test_fuzz_settings_are_reproducible():
    assert FUZZ.derandomize and FUZZ.database is None and math.isfinite(FUZZ.max_examples)
