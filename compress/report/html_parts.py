"""The pieces report.html is built of: markup made here from escaped parts, and tables
whose every cell from the report is escaped (names and reasons come from users and
from the tools the pipeline ran)."""
from __future__ import annotations

import html
import re

from compress.report.mdtext import fmt
from runtimes.safe_text import safe_text

# C0 but tab and newline, DEL and C1, as a script may hold them raw in its strings
_SCRIPT_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class Html(str):
    """Markup built here from escaped parts: a table cell that is not escaped again."""


def escape(value) -> str:
    """`value` (str() of it) as literal HTML text or attribute: a terminal control code
    in it (a profile's device.arch, an op type, a model's input name) shown as its
    escape, visible on the page and inert when the file is printed, then <>&"' escaped."""
    return html.escape(safe_text(value))


def script_text(code: str) -> str:
    """A script inlined in the page with each raw control character written as its
    escape (\\xNN): plotly.js keeps two in string literals, where the escape is the same
    character to JavaScript, and `cat report.html` would send them to the terminal."""
    return _SCRIPT_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", code)


def text(value) -> str:
    return fmt(value, 4, "g")


def _cell(value) -> str:
    if isinstance(value, Html):
        return f"<td>{value}</td>"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'<td class="num">{escape(text(value))}</td>'
    return f"<td>{escape(text(value))}</td>"


def table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
