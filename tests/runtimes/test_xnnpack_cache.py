"""XNNPACK's weight cache (`xnnpack_weight_cache` in a profile, `--xnnpack-weight-cache DIR`
for the runner), on the trained digits CNN through ai-edge-litert's CompiledModel API."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from runtimes import engines
from runtimes.errors import ProviderUnavailable, RuntimeInputError
from tests.conftest import REPO
from tests.runtimes.test_litert import FP32, INT8, _predict, held_out  # noqa: F401 (fixture)

pytest.importorskip("ai_edge_litert.compiled_model",
                    reason="the weight cache needs ai-edge-litert 2.x (its CompiledModel API)")

LITERT = engines.get("litert")


def _open(path, cache_dir, **settings):
    return LITERT.open(str(path), engines.Settings(threads=2, xnnpack_weight_cache=str(cache_dir),
                                                   **settings))


def _cache_of(session) -> dict:
    return session.describe()["xnnpack_weight_cache"]


@pytest.mark.parametrize("path", [FP32, INT8], ids=["fp32", "int8"])
def test_the_cache_is_written_once_then_mapped_with_the_same_outputs(path, tmp_path, held_out):  # noqa: F811
    images, _ = held_out
    with LITERT.open(str(path), engines.Settings(threads=2)) as plain:
        expected = _predict(plain, images[:64])
    with _open(path, tmp_path) as first:
        written = _cache_of(first)
        np.testing.assert_allclose(_predict(first, images[:64]), expected, rtol=1e-5, atol=1e-5)
    assert written["hit"] is False and os.path.getsize(written["file"]) > 0
    with _open(path, tmp_path) as second:
        assert _cache_of(second)["file"] == written["file"] and _cache_of(second)["hit"] is True
        assert second.describe()["xnnpack"] is True and second.describe()["threads"] == 2
        np.testing.assert_allclose(_predict(second, images[:64]), expected, rtol=1e-5, atol=1e-5)


def _with_weights_scaled(source, target, factor: float) -> None:
    """A copy of the float model with every float weight buffer scaled: the same graph
    and buffer layout, other weights (what re-exporting a model to one path gives)."""
    from ai_edge_litert import schema_py_generated as schema
    data = bytearray(source.read_bytes())
    model = schema.Model.GetRootAs(data, 0)
    for index in range(model.BuffersLength()):
        values = model.Buffers(index).DataAsNumpy()
        if isinstance(values, np.ndarray) and values.size >= 64 and values.size % 4 == 0:
            values.view(np.float32)[:] *= factor   # a view into `data`
    target.write_bytes(bytes(data))


def test_a_model_with_other_weights_never_runs_on_a_stale_cache(tmp_path, held_out):  # noqa: F811
    """LiteRT matches a cache to a model by buffer position: one named by the model's
    content cannot be another model's."""
    images, _ = held_out
    changed = tmp_path / "model.tflite"
    _with_weights_scaled(FP32, changed, 0.5)
    with _open(FP32, tmp_path / "cache") as original:
        original_out = _predict(original, images[:16])
    with LITERT.open(str(changed), engines.Settings(threads=2)) as plain:
        expected = _predict(plain, images[:16])
    assert np.max(np.abs(expected - original_out)) > 0.1   # the weights matter
    with _open(changed, tmp_path / "cache") as session:
        assert _cache_of(session)["hit"] is False
        np.testing.assert_allclose(_predict(session, images[:16]), expected, rtol=1e-5, atol=1e-5)
    assert len(list((tmp_path / "cache").glob("*.xnnpack_cache"))) == 2


def test_why_the_name_is_the_models_content(tmp_path, monkeypatch, held_out):  # noqa: F811
    """With one file name for both models (as a cache named by path would give a model
    re-exported in place), LiteRT runs the second model on the first one's weights."""
    from runtimes import xnnpack_cache
    images, _ = held_out
    changed = tmp_path / "changed.tflite"
    _with_weights_scaled(FP32, changed, 0.5)
    monkeypatch.setattr(xnnpack_cache, "cache_file",
                        lambda path, directory: str(tmp_path / "one-name.xnnpack_cache"))
    with _open(FP32, tmp_path) as original:
        original_out = _predict(original, images[:16])
    with _open(changed, tmp_path) as stale:
        assert _cache_of(stale)["hit"] is True
        np.testing.assert_allclose(_predict(stale, images[:16]), original_out, rtol=1e-5,
                                   atol=1e-5)


def test_a_copy_of_a_model_finds_the_cache_its_original_wrote(tmp_path):
    """What a benchmark pushed to a device gives: the same bytes at another path."""
    copy = tmp_path / "pushed" / "model.tflite"
    copy.parent.mkdir()
    shutil.copyfile(FP32, copy)
    with _open(FP32, tmp_path / "cache") as first:
        written = _cache_of(first)["file"]
    os.utime(copy, ns=(1, 1))   # another modification time too
    with _open(copy, tmp_path / "cache") as second:
        assert _cache_of(second) == {**_cache_of(second), "file": written, "hit": True}


@pytest.mark.parametrize("settings, said", [
    ({"xnnpack": False}, "needs XNNPACK"),
    ({"delegate": "libedgetpu.so.1"}, "cannot go with the delegate 'libedgetpu.so.1'"),
])
def test_settings_that_cannot_go_with_the_cache_are_refused(settings, said, tmp_path):
    with pytest.raises(RuntimeInputError, match=said):
        engines.check(engines.Settings(xnnpack_weight_cache=str(tmp_path), **settings))


def test_a_profile_asking_for_the_cache_without_xnnpack_is_refused_when_read():
    from pydantic import ValidationError

    from profiles.schema import Runtime
    assert Runtime(xnnpack_weight_cache="~/.cache/xnnpack").xnnpack_weight_cache
    with pytest.raises(ValidationError, match="needs XNNPACK"):
        Runtime(xnnpack=False, xnnpack_weight_cache="~/.cache/xnnpack")


def _bench(*args):
    return subprocess.run([sys.executable, "-m", "runtimes", "bench", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def test_the_runner_records_the_cache_and_the_load_time(tmp_path):
    records = []
    for _ in range(2):
        done = _bench(FP32, "--json", "--runs", "5", "--threads", "2",
                      "--xnnpack-weight-cache", tmp_path)
        assert done.returncode == 0, done.stderr
        assert "INFO" not in done.stderr   # LiteRT's accelerator log stays off the screen
        records.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = (r["runtime"]["xnnpack_weight_cache"] for r in records)
    assert (first["hit"], second["hit"]) == (False, True) and first["file"] == second["file"]
    for record in records:
        assert record["load_ms"] > 0 and record["first_run_ms"] > 0


@pytest.mark.parametrize("args, said", [
    (["--no-xnnpack"], "needs XNNPACK"),
    ([], "cannot be made"),
])
def test_the_runner_refuses_a_cache_it_cannot_use_in_one_line(args, said, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = _bench(FP32, "--runs", "2", "--xnnpack-weight-cache", blocker / "cache", *args)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("hwcap, refused", [(0b1_1111_1111, False), (0b0_1111_1111, True)])
def test_an_arm_cpu_without_lse_is_told_not_killed(monkeypatch, hwcap, refused, tmp_path):
    """ai-edge-litert 2.3's CompiledModel runtime dies of SIGILL on an ARMv8.0 core (the
    emulated Pi 4 shows it, tests/device): the kernel's HWCAP_ATOMICS bit decides first.
    The architecture and the bit are faked here (this is an x86 machine)."""
    from runtimes import litert_compiled
    monkeypatch.setattr(litert_compiled.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(litert_compiled, "_hwcap", lambda: hwcap)
    if refused:
        with pytest.raises(ProviderUnavailable, match="LSE atomics.*Raspberry Pi 4"):
            _open(FP32, tmp_path)
    else:
        _open(FP32, tmp_path).close()
