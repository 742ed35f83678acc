"""Text for language models that needs no download: English prose that ships with
CPython (`pydoc_data.topics`, the language reference's topics, ~465k characters), in a
fixed order so the same token ids come out on every machine with the same Python."""
from __future__ import annotations


def python_docs_text() -> str:
    """The topics of the Python reference, sorted by name, joined by blank lines."""
    from pydoc_data.topics import topics
    return "\n\n".join(topics[name] for name in sorted(topics))
