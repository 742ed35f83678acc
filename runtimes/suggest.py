"""'Did you mean ...?' for a misspelt name: a stage type, a setting, a profile, a scheme,
a factory. Here, below every package, so that profiles/ and compress/ say it alike."""
from __future__ import annotations

import difflib
from typing import Iterable


def closest(given: str, choices: Iterable[str]) -> str | None:
    """The choice `given` most likely misspells, or None when none is close: a case slip
    first, then difflib's ratio (0.6 and up: `buld` -> `build`, `calibraton` ->
    `calibration`; `x` -> nothing)."""
    choices = [str(c) for c in choices]
    if not isinstance(given, str) or not given or not choices:
        return None
    same = [c for c in choices if c.lower() == given.lower() and c != given]
    if same:
        return same[0]
    found = difflib.get_close_matches(given, choices, n=1, cutoff=0.6)
    return found[0] if found and found[0] != given else None


AT_THE_END, IN_BETWEEN = "; did you mean '{}'?", " (did you mean '{}'?)"


def did_you_mean(given: str, choices: Iterable[str], form: str = AT_THE_END) -> str:
    """"; did you mean 'build'?" to end a message (IN_BETWEEN: " (did you mean
    'build'?)" before more of it), or '' when no choice is close."""
    found = closest(given, choices)
    return form.format(found) if found else ""
