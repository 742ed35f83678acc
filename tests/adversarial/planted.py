"""What the tests of planted links and full disks share (test_links_and_space.py,
test_followups_cache.py): a folder outside the runs that a planted link points to,
checked left exactly as it was, and a real small file system to fill."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

PRECIOUS = "the user's own file: nothing may change it\n"


def snapshot(folder: Path) -> dict:
    """Every entry under `folder`: a file's text, else whether it is a link."""
    return {str(p.relative_to(folder)): (p.read_text() if p.is_file() and not p.is_symlink()
                                         else os.path.islink(p))
            for p in sorted(folder.rglob("*"))}


def outside(tmp_path: Path, *files: str) -> Iterator[Path]:
    """For a fixture: `tmp_path/outside` with precious.txt, a folder `dir` and `files`
    (paths in it, each holding PRECIOUS); after the test, checked unchanged."""
    folder = tmp_path / "outside"
    (folder / "dir").mkdir(parents=True)
    for name in ("precious.txt", *files):
        (folder / name).write_text(PRECIOUS)
    before = snapshot(folder)
    yield folder
    assert snapshot(folder) == before


@contextlib.contextmanager
def tmpfs(folder: Path, size: str):
    """A real file system of `size` at `folder`; skips where mounting is not allowed."""
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
