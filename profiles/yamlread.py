"""Read a YAML file a person wrote (a pipeline, a profile) safely and strictly.

- UTF-8 text only (a UTF-8 byte-order mark is fine): Latin-1, UTF-16 and binary files get
  one message saying which, not a decoding traceback.
- Bounded: at most MAX_BYTES, nesting at most MAX_DEPTH deep, and aliases may not expand
  the document beyond MAX_NODES nodes (a 1 KB "billion laughs" file would otherwise
  expand to gigabytes once validated).
- A key written twice in one mapping is an error naming both lines: YAML's own rule is
  that the last one silently wins.
- SafeLoader only: no Python objects from tags.
"""
from __future__ import annotations

from pathlib import Path

import yaml

MAX_BYTES = 4 * 2**20
MAX_DEPTH = 64
MAX_NODES = 100_000


class YamlProblem(Exception):
    """What is wrong with the file, and the line where that is known."""

    def __init__(self, message: str, line: int | None = None):
        self.line = line
        super().__init__(message)


def read_text(path: Path) -> str:
    """The file's text, or a YamlProblem saying why it is not UTF-8 text."""
    if path.stat().st_size > MAX_BYTES:
        raise YamlProblem(f"the file is {path.stat().st_size} bytes; a pipeline or profile "
                          f"is text of at most {MAX_BYTES // 2**20} MiB")
    data = path.read_bytes()
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in data[:4096]:
        kind = "UTF-16 text" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else "binary data"
        raise YamlProblem(f"the file holds {kind}, not UTF-8 text; save it as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise YamlProblem(f"the file is not UTF-8 (byte 0x{data[exc.start]:02x} at line "
                          f"{line}; Latin-1 perhaps): save it as UTF-8", line) from None


def _children(node) -> list:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_size(root) -> None:
    """Depth and expanded size, in a post-order walk without recursion that visits each
    node once: an alias is the same node object as its anchor, so its expanded size comes
    from a memo (and an alias inside its own anchor is a cycle)."""
    size, open_nodes, stack = {}, set(), [(root, False, 1)]
    while stack:
        node, done, depth = stack.pop()
        if done:
            open_nodes.discard(id(node))
            size[id(node)] = 1 + sum(size[id(child)] for child in _children(node))
            if size[id(node)] > MAX_NODES:
                raise YamlProblem(f"aliases expand it to more than {MAX_NODES} values; write "
                                  "the values out instead of repeating anchors",
                                  node.start_mark.line + 1)
            continue
        if id(node) in size:
            continue
        if depth > MAX_DEPTH:
            raise YamlProblem(f"nested more than {MAX_DEPTH} levels deep",
                              node.start_mark.line + 1)
        open_nodes.add(id(node))
        stack.append((node, True, depth))
        for child in _children(node):
            if id(child) in open_nodes:
                raise YamlProblem("an alias refers to a mapping or list it is inside of",
                                  child.start_mark.line + 1)
            if id(child) not in size:
                stack.append((child, False, depth + 1))


def _check_duplicates(root) -> None:
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            lines: dict = {}
            for key, _ in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else None
                if name is not None and name in lines:
                    raise YamlProblem(f"key '{name}' is written twice, at lines {lines[name]} "
                                      f"and {key.start_mark.line + 1}; keep one",
                                      key.start_mark.line + 1)
                lines[name] = key.start_mark.line + 1
        stack.extend(_children(node))


def line_map(node) -> dict:
    """{path tuple: line number} of every key and list item under `node` (iterative:
    an aliased node is walked where it is used, bounded by _check_size)."""
    lines, stack = {}, [(node, ())]
    while stack:
        current, path = stack.pop()
        lines.setdefault(path, current.start_mark.line + 1)
        if isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                lines[path + (key.value,)] = key.start_mark.line + 1
                stack.append((value, path + (key.value,)))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend((item, path + (index,)) for index, item in enumerate(current.value))
    return lines


def line_for(loc: tuple, lines: dict) -> int | None:
    """The line of the deepest part of `loc` that exists in the file (parts pydantic adds,
    such as a union member's name, are skipped)."""
    path: tuple = ()
    for part in loc:
        if path + (part,) in lines:
            path += (part,)
    return lines.get(path)


def load(path: Path):
    """(data, root node or None): the document checked as the module docstring says."""
    text = read_text(path)
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # its reader refuses control characters here
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_size(node)
        _check_duplicates(node)
        return loader.construct_document(node), node
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlProblem(f"not valid YAML: {problem}", mark.line + 1 if mark else None) from None
    except RecursionError:
        raise YamlProblem(f"nested more than {MAX_DEPTH} levels deep") from None
    finally:
        if loader is not None:
            loader.dispose()
