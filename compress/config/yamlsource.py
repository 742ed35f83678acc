"""Read YAML while remembering where each key and list item was written.

pydantic reports a field path (`stages.1.calibration`); a person wants the line. We keep
a map from path to line so a ConfigError can name both.
"""
from __future__ import annotations

from pathlib import Path

from compress.errors import ConfigError
from profiles.yamlread import line_for, line_map  # noqa: F401 (line_for re-exported)


def load_yaml_with_lines(path: str | Path) -> tuple[object, dict]:
    """Return (data, {path tuple: line number}); the file read as profiles.yamlread
    reads it (UTF-8, bounded, no duplicate keys)."""
    from profiles.yamlread import YamlProblem, load
    path = Path(path)
    if path.is_dir():
        raise ConfigError("is a directory, not a file: give the path of a pipeline YAML in it",
                          file=str(path))
    if not path.is_file():
        raise ConfigError("file not found. Give the path of a pipeline YAML "
                          "(see examples/quickstart/pipeline.yaml)", file=str(path))
    try:
        data, node = load(path)
    except YamlProblem as exc:
        raise ConfigError(str(exc), file=str(path), line=exc.line) from None
    except OSError as exc:
        raise ConfigError(f"cannot read it: {exc.strerror}", file=str(path)) from None
    return data, (line_map(node) if node is not None else {})
