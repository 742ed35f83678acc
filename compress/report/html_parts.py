"""The pieces report.html is built of: markup made here from escaped parts, and tables
whose every cell from the report is escaped (names and reasons come from users and
from the tools the pipeline ran)."""
from __future__ import annotations

from html import escape

from compress.report.mdtext import fmt


class Html(str):
    """Markup built here from escaped parts: a table cell that is not escaped again."""


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
