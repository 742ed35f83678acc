"""Text from users and libraries, made literal in Markdown (report.md)."""
from __future__ import annotations

import re

from runtimes.safe_text import safe_text

# What Markdown (GitHub's flavour) reads as formatting: emphasis (* _), code (`), links
# ([ ]), HTML and autolinks (< >), entities (&), strikethrough (~), table cells (|), and
# the backslash that escapes all of them.
_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")


def md(value) -> str:
    """`value` as literal Markdown text: an artifact id, a stage, target or host name, a
    reason, an error text, a path. A newline would end a table row or a list item, and
    a '#' starting a line makes a heading: both are neutralised too, and a terminal
    control code (a profile's device.arch, an op type, an experiment name read back) is
    shown as its escape, since `cat report.md` would run it. Numbers formatted by the
    report and its own fixed words need none of this."""
    text = safe_text(" ".join(str(value).splitlines()))
    text = _SPECIAL.sub(r"\\\1", text)
    return "\\" + text if text.startswith("#") else text


def fmt(value, digits: int = 2, style: str = "f") -> str:
    """A number for a table ('—' where there is none); `style` f (fixed) or g."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}{style}}"
    return str(value)
