"""Links planted in a run folder are never followed, a full disk is said as such, and
something else where a report goes is named (issue 37).

A run folder may sit where others can write (a CI cache): a link planted at a name a run
writes (`.lock`, `history`, `report.json`, a stage folder, a temporary name) must never
have it truncate or overwrite the file the link points to; it is refused, exit 2, naming
it. A full disk (a real tmpfs of a few hundred KiB, mounted here where that is allowed)
is a NoSpace, exit 2, with nothing half-written left that a later run would trust.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compress.core import safe_files
from compress.core.artifacts import StageDir
from compress.core.safe_files import InTheWay
from compress.errors import CompressError, NoSpace
from compress.runner import crash, history
from compress.runner.lock import RunLock
from tests.adversarial import planted
from tests.conftest import child_env, pipeline_dict, run_cli, write_pipeline

REPORTS = ("manifest.json", "report.md", "report.html", "report.json")


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside the run folder (what a planted link points to); every test
    checks it is left exactly as it was."""
    yield from planted.outside(tmp_path, "dir/kept.txt")


@pytest.fixture
def run_dir(tmp_path) -> Path:
    folder = tmp_path / "runs" / "t"
    folder.mkdir(parents=True)
    return folder


def _plant(path: Path, kind: str, outside: Path) -> None:
    """Something compress did not make at `path`."""
    if kind == "link to a file":
        path.symlink_to(outside / "precious.txt")
    elif kind == "link to a folder":
        path.symlink_to(outside / "dir", target_is_directory=True)
    elif kind == "dangling link":
        path.symlink_to(outside / "not-yet")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        (path / "inside").mkdir(parents=True)
    else:
        path.write_text("a file")


def _write_reports(run_dir: Path) -> None:
    safe_files.write_set([(run_dir / name, f"new {name}") for name in REPORTS])


def _archive(run_dir: Path) -> None:
    for name in REPORTS:
        (run_dir / name).write_text(f"this run's {name}")
    history.archive(run_dir, {"pipeline": {"config_sha256": "0" * 64}})


# name -> (how a run writes it, what belongs there)
WRITES = {
    "report.json": (_write_reports, "file"),
    "report.html": (_write_reports, "file"),
    "manifest.json": (_write_reports, "file"),
    ".lock": (lambda d: RunLock(d).acquire(print), "file"),
    "history": (_archive, "folder"),
    "01-export.onnx": (lambda d: StageDir(d, "01-export.onnx").cached("key"), "folder"),
    # a stage's private folder and a temporary report: leftovers, removed when plain
    ".01-export.onnx.partial": (lambda d: StageDir(d, "01-export.onnx").begin(), None),
    ".report.json.tmp-1-ab12cd34": (lambda d: RunLock(d).acquire(print), None),
}
LINKS = ("link to a file", "link to a folder", "dangling link", "fifo")


@pytest.mark.parametrize("kind", LINKS + ("the wrong kind",))
@pytest.mark.parametrize("name", sorted(WRITES))
def test_nothing_planted_in_a_run_folder_is_followed_or_overwritten(run_dir, outside,
                                                                    name, kind):
    write, belongs = WRITES[name]
    if kind == "the wrong kind":
        if belongs is None:
            pytest.skip("a plain leftover is removed, not refused")
        kind = "file" if belongs == "folder" else "folder"
    _plant(run_dir / name, kind, outside)
    with pytest.raises(InTheWay) as caught:
        write(run_dir)
    message = str(caught.value)
    assert caught.value.exit_code == 2 and str(run_dir / name) in message
    assert "remove it" in message and "\n" not in message
    assert ("symbolic link" in message) == ("link" in kind)
    assert os.path.lexists(run_dir / name)   # named, not removed nor replaced
    assert not [p for p in run_dir.iterdir() if ".tmp-" in p.name and p.name != name]


def test_a_lock_that_is_a_hard_link_to_another_file_is_not_truncated(run_dir, outside):
    os.link(outside / "precious.txt", run_dir / ".lock")
    with pytest.raises(InTheWay, match="2 names"):
        RunLock(run_dir).acquire(print)
    (run_dir / ".lock").unlink()   # `outside` is checked unchanged


def test_a_run_folder_reached_through_a_link_is_the_users_choice(tmp_path):
    real = tmp_path / "big-disk"
    real.mkdir()
    (tmp_path / "runs").symlink_to(real, target_is_directory=True)   # output: runs
    made = safe_files.make_run_dir(tmp_path / "runs" / "t")
    assert (real / "t").is_dir() and not made.is_symlink()
    (real / "u").symlink_to(real / "t", target_is_directory=True)     # the run folder itself
    with pytest.raises(InTheWay, match="symbolic link"):
        safe_files.make_run_dir(tmp_path / "runs" / "u")


def test_a_lock_refused_is_released(run_dir, outside):
    (run_dir / ".lock").symlink_to(outside / "precious.txt")
    with pytest.raises(InTheWay):
        RunLock(run_dir).acquire(print)
    (run_dir / ".lock").unlink()
    (run_dir / ".x.tmp-1-ab").symlink_to(outside / "precious.txt")   # a leftover in the way
    with pytest.raises(InTheWay):
        RunLock(run_dir).acquire(print)
    (run_dir / ".x.tmp-1-ab").unlink()
    with RunLock(run_dir) as lock:   # the failed attempt holds no lock
        lock.acquire(lambda note: pytest.fail(f"waited: {note}"))
    assert (run_dir / ".lock").read_text() == str(os.getpid())


def test_report_html_as_a_folder_leaves_the_last_reports_as_they_were(run_dir):
    for name in REPORTS:
        (run_dir / name).write_text(f"last run's {name}")
    (run_dir / "report.html").unlink()
    (run_dir / "report.html").mkdir()
    with pytest.raises(InTheWay, match="report.html is a folder"):
        _write_reports(run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(REPORTS)
    assert (run_dir / "report.json").read_text() == "last run's report.json"


def test_a_crash_log_is_never_written_through_a_link(run_dir, outside):
    # the log's name is the second and the pid: planted for the next seconds
    now = time.time()
    for second in range(3):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now + second))
        (run_dir / f"crash-{stamp}-{os.getpid()}.log").symlink_to(outside / "precious.txt")
    crash.set_run_dir(run_dir)
    try:
        try:
            raise RuntimeError("a bug")
        except RuntimeError as exc:
            log = crash.write_log(exc)
    finally:
        crash.set_run_dir(None)
    try:
        assert log is not None and not log.is_symlink() and "RuntimeError: a bug" in \
            log.read_text()
    finally:
        if log is not None and log.parent != run_dir:
            log.unlink()


# --- a full disk ---------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    with planted.tmpfs(tmp_path / "disk", "256k") as folder:
        yield folder


def _fill(path: Path) -> None:
    """Write into `path` until the disk is full, the error ignored: what a library that
    does not check its writes leaves behind, a file cut short."""
    with open(path, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def test_a_write_on_a_full_disk_is_no_space_and_leaves_nothing(small_disk):
    (small_disk / "report.json").write_text("last run's")
    with pytest.raises(NoSpace) as caught:
        safe_files.write_atomic(small_disk / "report.json", b"x" * 1_000_000)
    message = str(caught.value)
    assert caught.value.exit_code == 2 and isinstance(caught.value, CompressError)
    assert f"no space left on the disk of {small_disk} (mounted at {small_disk}" in message
    assert "needed about 1.0 MB" in message
    assert [p.name for p in small_disk.iterdir()] == ["report.json"]
    assert (small_disk / "report.json").read_text() == "last run's"


def test_the_reports_on_a_full_disk_are_all_the_last_runs(small_disk):
    for name in REPORTS:
        (small_disk / name).write_text(f"last run's {name}")
    files = [(small_disk / name, "new" * (100_000 if name == "report.html" else 1))
             for name in REPORTS]
    with pytest.raises(NoSpace):
        safe_files.write_set(files)
    assert {p.name: p.read_text() for p in small_disk.iterdir()} == {
        name: f"last run's {name}" for name in REPORTS}


def _failing_stage(disk: Path, fill: bool) -> None:
    """A stage whose library wrote a file, then failed reading it back."""
    stage = StageDir(disk, "02-quantize")
    made = stage.begin()
    try:
        if fill:
            _fill(made / "preprocessed.onnx")
        # what protobuf says of a file cut short, read back by the next step
        raise ValueError("Error parsing message with type 'onnx.ModelProto'")
    finally:
        stage.abort()


def test_a_stage_whose_file_was_cut_short_fails_as_no_space(tmp_path):
    with planted.tmpfs(tmp_path / "disk", "4m") as disk:
        with pytest.raises(ValueError, match="Error parsing"):   # room left: its own error
            _failing_stage(disk, fill=False)
        with pytest.raises(NoSpace) as caught:
            _failing_stage(disk, fill=True)
        assert "no space left" in str(caught.value) and "Error parsing message" in \
            str(caught.value)
        assert isinstance(caught.value.__cause__, ValueError)
        assert list(disk.iterdir()) == []   # its files gone, the disk free again


def test_a_full_disk_under_a_librarys_error_is_found():
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/nowhere/model.onnx")
    try:
        try:
            raise full
        except OSError as exc:
            raise CompressError("onnxruntime failed inside itself") from exc
    except CompressError as exc:
        found = NoSpace.found_in(exc)
    assert found is not None and str(found).startswith("no space left on the disk of "
                                                       "/nowhere (mounted at /")
    assert NoSpace.found_in(CompressError("a model error")) is None
    assert NoSpace.found_in(OSError(errno.EACCES, "denied")) is None


def test_the_cli_says_a_full_disk_in_one_line(small_disk):
    with open(small_disk / "filler", "wb") as fh, contextlib.suppress(OSError):
        fh.write(b"\0" * 300_000)
    with open(small_disk / "schema.json", "w") as out:   # ~100 kB of JSON
        child = subprocess.run([sys.executable, "-m", "compress", "schema"], stdout=out,
                               stderr=subprocess.PIPE, text=True, timeout=120,
                               env=child_env())
    assert child.returncode == 2, child.stderr
    assert child.stderr.startswith("error: no space left on ")
    assert len(child.stderr.splitlines()) == 1
    assert "Traceback" not in child.stderr


# --- whole runs ------------------------------------------------------------------------

@pytest.mark.runs
@pytest.mark.parametrize("name", [".lock", "01-export.onnx", "report.json", "history"])
def test_a_run_refuses_a_planted_link(project, outside, name):
    run_dir = project / "runs" / "t"
    run_dir.mkdir(parents=True)
    (run_dir / name).symlink_to(outside / ("dir" if name in ("history", "01-export.onnx")
                                           else "precious.txt"))
    child = run_cli("run", write_pipeline(project, pipeline_dict()), "--quiet", cwd=project)
    assert child.returncode == 2, child.stderr
    assert f"{run_dir / name} is a symbolic link" in child.stderr
    assert "Traceback" not in child.stderr
    assert not [p for p in run_dir.iterdir() if p.name in REPORTS and not p.is_symlink()]
    # what the run writes at its end is checked before any work
    made = sorted(p.parent.name for p in run_dir.rglob("stage.json"))
    assert made == (["00-source"] if name == "01-export.onnx" else [])


@pytest.mark.runs
def test_a_run_with_report_html_a_folder_names_it(project):
    (project / "runs" / "t" / "report.html").mkdir(parents=True)
    child = run_cli("run", write_pipeline(project, pipeline_dict()), "--quiet", cwd=project)
    assert child.returncode == 2, child.stderr
    assert f"{project / 'runs' / 't' / 'report.html'} is a folder" in child.stderr
    assert not (project / "runs" / "t" / "report.json").exists()


@pytest.mark.runs
@pytest.mark.parametrize("size", ["300k", "2m"])
def test_a_run_on_a_full_disk_says_so_and_leaves_nothing_half_written(project, size):
    with planted.tmpfs(project / "runs", size):
        child = run_cli("run", write_pipeline(project, pipeline_dict()), "--quiet",
                        cwd=project)
        assert child.returncode == 2, child.stdout + child.stderr
        assert "no space left on the disk of" in child.stderr, child.stderr
        assert "Traceback" not in child.stderr
        left = [p for p in (project / "runs").rglob("*")
                if ".partial" in p.name or ".tmp-" in p.name]
        assert left == []
        run_dir = project / "runs" / "t"
        if (run_dir / "report.json").exists():   # a finished set, or none of it
            assert all((run_dir / name).is_file() for name in REPORTS)
            json.loads((run_dir / "report.json").read_text())
