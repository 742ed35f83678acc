"""Live progress for long loops (calibration, benchmarks), quiet off a terminal.

Stages call `ctx.progress.task("calibrating", total)` and get back a function to advance
it. With `--quiet` or when stderr is not a terminal, nothing is drawn and short status
lines are printed instead only when `verbose` is asked for.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator

from runtimes.safe_text import safe_text


class Progress:
    def __init__(self, quiet: bool = False):
        self.live = not quiet and sys.stderr.isatty()
        self.quiet = quiet
        self._rich = None

    def __enter__(self):
        if self.live:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress,
                                       SpinnerColumn, TextColumn, TimeElapsedColumn)
            self._rich = RichProgress(SpinnerColumn(), TextColumn("{task.description}"),
                                      BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                      console=Console(stderr=True), transient=True)
            self._rich.__enter__()
        return self

    def __exit__(self, *exc):
        if self._rich is not None:
            self._rich.__exit__(*exc)
            self._rich = None

    def note(self, message: str) -> None:
        """A one-line status message (stderr), kept short and skipped with --quiet."""
        if self.quiet:
            return
        # notes carry names, paths, URIs and library messages: nothing in them may drive
        # the terminal or show a password; rich is told not to read them as markup
        message = safe_text(message)
        if self._rich is not None:
            self._rich.console.print(message, highlight=False, markup=False, emoji=False)
        else:
            print(message, file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def task(self, description: str, total: int | None) -> Iterator[Callable[..., None]]:
        if self._rich is None:
            yield lambda advance=1, completed=None: None
            return
        from rich.markup import escape   # a '[' in an artifact's name is no markup
        task_id = self._rich.add_task(escape(safe_text(description, multiline=False)),
                                      total=total)

        def update(advance: int = 1, completed: int | None = None) -> None:
            if completed is not None:
                self._rich.update(task_id, completed=completed)
            else:
                self._rich.advance(task_id, advance)
        try:
            yield update
        finally:
            self._rich.remove_task(task_id)
