"""Text from outside made safe to print: a model's op names, a profile's fields, a report
read back, a library's message, a path, a tracking URI.

Such text may hold terminal control codes: an OSC sequence (ESC ] ... BEL) sets the
terminal's title or a hyperlink, a CSI sequence (ESC [ ...) clears the screen or moves
the cursor, a carriage return overwrites what the line said, a C1 byte (0x80-0x9f) is an
escape on its own in some terminals, a bidirectional override shows text in another order
than it is. Printed as they are, they drive the terminal of whoever reads the output, and
the CI log keeps them. `safe_text` shows each as its escape (ESC as the four characters
`\\x1b`), so the text stays readable and nothing in it acts; printable text, a Windows
path's backslashes included, comes back unchanged, and a second pass changes nothing.

A URL's password (`scheme://user:PASSWORD@host`) is masked as `***` by the same call
(`mask_credentials` is that part alone): a CI log or a shared report keeps whatever is
shown.

Lowest layer (runtimes imports nothing of the pipeline): every package uses this one.
"""
from __future__ import annotations

import re

# C0 but tab and newline, DEL, C1, and the bidirectional embeddings, overrides and
# isolates (U+202A-U+202E, U+2066-U+2069)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_LINE_BREAKS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
# scheme://user:password@ : the password runs to the last '@' before the path (as
# urllib.parse reads a netloc), so one holding an unescaped '@' is masked whole
_CREDENTIALS = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/?#@:]*:)[^\s/?#]*@")
MASK = "***"


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def mask_credentials(text: str) -> str:
    """`text` with the password of every URL in it replaced by ***:
    http://user:secret@host:5000 -> http://user:***@host:5000."""
    return _CREDENTIALS.sub(lambda m: m.group(1) + MASK + "@", text)


def safe_text(value, *, multiline: bool = True) -> str:
    """`value` (str() of it) as it may be printed: URL passwords masked, control
    characters shown as escapes. multiline=False escapes newlines and tabs too, for a
    field inside one line of output (a table row, a verdict line), where a newline would
    start a line that seems to be the tool's own."""
    text = mask_credentials(value if isinstance(value, str) else str(value))
    return (_CONTROL if multiline else _LINE_BREAKS).sub(_escape, text)
