"""Read YAML while remembering where each key and list item was written.

pydantic reports a field path (`stages.1.calibration`); a person wants the line. We keep
a map from path to line so a ConfigError can name both.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from compress.errors import ConfigError


def _walk(node, path: tuple, lines: dict) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key_path = path + (key_node.value,)
            _walk(value_node, key_path, lines)
            lines[key_path] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, path + (index,), lines)


def load_yaml_with_lines(path: str | Path) -> tuple[object, dict]:
    """Return (data, {path tuple: line number}); the file read as profiles.yamlread
    reads it (UTF-8, bounded, no duplicate keys)."""
    from profiles.yamlread import YamlProblem, load
    path = Path(path)
    if not path.is_file():
        raise ConfigError("file not found. Give the path of a pipeline YAML "
                          "(see examples/quickstart/pipeline.yaml)", file=str(path))
    try:
        data, node = load(path)
    except YamlProblem as exc:
        raise ConfigError(str(exc), file=str(path), line=exc.line) from None
    except OSError as exc:
        raise ConfigError(f"cannot read it: {exc.strerror}", file=str(path)) from None
    lines: dict = {}
    if node is not None:
        _walk(node, (), lines)
    return data, lines


def line_for(loc: tuple, lines: dict) -> int | None:
    """The line of the deepest part of `loc` that exists in the file.

    pydantic puts names in `loc` that are not in the file (a union member such as
    `quantize` in stages.1.quantize.scheme); those parts are skipped."""
    path: tuple = ()
    for part in loc:
        if path + (part,) in lines:
            path += (part,)
    return lines.get(path)
