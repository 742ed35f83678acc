"""One run at a time per run directory.

Two runs of one pipeline into the same folder would delete each other's half-made stages
and list files the other removed: the second waits for the first (saying so), then reuses
what it finished. The lock is an flock on runs/<name>/.lock, which the kernel releases
when its holder dies, even by kill -9, so a crashed run never blocks the next one.
Leftovers of a killed run (a stage's .partial folder, a half-written report) are removed
once the lock is held. Neither the lock nor a leftover is ever followed where it is a
link (compress.core.safe_files): a planted one is refused, naming it.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from compress.core.safe_files import open_regular, remove

LEFTOVERS = (".*.partial", ".*.tmp-*", ".report.md.tmp")


class RunLock:
    def __init__(self, run_dir: Path):
        self.run_dir, self.path, self._fd = run_dir, run_dir / ".lock", None

    def _holder(self) -> str:
        try:   # through the descriptor: the name may have been swapped for a link since
            return os.pread(self._fd, 32, 0).decode(errors="replace").strip() or "unknown"
        except OSError:
            return "unknown"

    def acquire(self, note) -> None:
        """Take the lock, waiting (and saying so with `note`) while another run holds it."""
        self._fd = open_regular(self.path)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            note(f"waiting: another run (pid {self._holder()}) is writing {self.run_dir}; "
                 "this one goes on when it ends, reusing what it finished")
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, str(os.getpid()).encode(), 0)
            self._clear_leftovers()
        except BaseException:   # a leftover in the way: the next run may try again
            self.release()
            raise

    def _clear_leftovers(self) -> None:
        """What a killed run left half-made: never trusted, removed under the lock."""
        for pattern in LEFTOVERS:
            for stale in self.run_dir.glob(pattern):
                remove(stale)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
