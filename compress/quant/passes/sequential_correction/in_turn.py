"""What both formats' backends share: the correction run layer after layer on the
calibration feeds, under one progress line, on all the machine's cores."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

# the progress line of both formats, with the count of calibration samples
SAID = "bias correction (sequential): one layer at a time, in the int8 model ({} samples)"


def corrected(run, source: Path, feeds: list[dict], correct: Callable) -> dict:
    """`correct(source, run.target, feeds, threads=, advance=)`'s report, under the line."""
    with run.ctx.progress.task(SAID.format(len(feeds)), None) as advance:
        return correct(source, run.target, feeds, threads=os.cpu_count() or 1, advance=advance)
