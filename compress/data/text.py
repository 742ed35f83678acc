"""Text for language models (data.text): read from a file, a loader, or the English text
that ships with CPython (runtimes/lm/text.py: the device's benchmark builds its prompts
from the same text, without torch)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from compress.errors import DataError
from runtimes.lm.text import python_docs_text  # noqa: F401  (also imported from here)


def read_text(spec, base_dir: Path) -> str:
    """The text `spec` (config.data.TextData) names, as one string."""
    if spec.python_docs:
        return python_docs_text()
    if spec.file is not None:
        path = Path(spec.file).expanduser()
        path = path if path.is_absolute() else Path(base_dir) / path
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"data.text.file {path}: cannot be read as UTF-8 text ({exc})") \
                from None
    return _from_loader(spec.loader, base_dir)


def _from_loader(loader, base_dir: Path) -> str:
    label = loader if isinstance(loader, str) else getattr(loader, "__name__", "loader")
    if isinstance(loader, str):
        from compress.core.imports import import_callable
        loader = import_callable(loader, base_dir, DataError, "data.text.loader")
    try:
        made = loader()
    except (Exception, SystemExit) as exc:   # user code, sys.exit too: in its own words
        raise DataError(f"data.text.loader '{label}' raised {type(exc).__name__}: {exc}") \
            from exc
    if isinstance(made, str):
        return made
    if isinstance(made, (list, tuple)) and made and all(isinstance(t, str) for t in made):
        return "\n\n".join(made)
    raise DataError(f"data.text.loader returned {type(made).__name__}: it must return a "
                    "string or a non-empty list of strings")


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
