"""One run at a time per run directory.

Two runs of one pipeline into the same folder would delete each other's half-made stages
and list files the other removed: the second waits for the first (saying so), then reuses
what it finished. The lock is an flock on runs/<name>/.lock, which the kernel releases
when its holder dies, even by kill -9, so a crashed run never blocks the next one.
Leftovers of a killed run (a stage's .partial folder, a half-written report) are removed
once the lock is held.
"""
from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

LEFTOVERS = (".*.partial", ".*.tmp-*", ".report.md.tmp")


class RunLock:
    def __init__(self, run_dir: Path):
        self.run_dir, self.path, self._fd = run_dir, run_dir / ".lock", None

    def _holder(self) -> str:
        try:
            return self.path.read_text().strip() or "unknown"
        except OSError:
            return "unknown"

    def acquire(self, note) -> None:
        """Take the lock, waiting (and saying so with `note`) while another run holds it."""
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            note(f"waiting: another run (pid {self._holder()}) is writing {self.run_dir}; "
                 "this one goes on when it ends, reusing what it finished")
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, str(os.getpid()).encode(), 0)
        self._clear_leftovers()

    def _clear_leftovers(self) -> None:
        """What a killed run left half-made: never trusted, removed under the lock."""
        for pattern in LEFTOVERS:
            for stale in self.run_dir.glob(pattern):
                if stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)
                else:
                    stale.unlink(missing_ok=True)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
