"""Functions a reader cannot hold at once: longer than --lines or with more than
--params parameters (self and cls not counted; *args and **kwargs count one each),
and modules longer than --module-lines.

    python tests/function_sizes.py compress runtimes export profiles
"""
import argparse
import ast
import sys
from pathlib import Path


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    count = len([n for n in names if n not in ("self", "cls")])
    return count + (args.vararg is not None) + (args.kwarg is not None)


def _lines(node) -> int:
    """From the def (or its first decorator) to its last line."""
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return node.end_lineno - first + 1


def offenders(paths, skip=(), max_lines=60, max_params=6, max_module_lines=300):
    """(path, line, name, lines, params, what) for each function or module over a limit."""
    found = []
    files = sorted(f for p in map(Path, paths) for f in ([p] if p.is_file() else p.rglob("*.py")))
    for path in files:
        if any(path.as_posix().startswith(s.rstrip("/")) for s in skip):
            continue
        text = path.read_text()
        module_lines = len(text.splitlines())
        if module_lines > max_module_lines:
            found.append((path.as_posix(), 1, "<module>", module_lines, 0, "module"))
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines, params = _lines(node), _params(node)
                what = "+".join(w for w, over in (("lines", lines > max_lines),
                                                  ("params", params > max_params)) if over)
                if what:
                    found.append((path.as_posix(), node.lineno, node.name, lines, params, what))
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--skip", action="append", default=[], help="a path prefix to pass over")
    parser.add_argument("--lines", type=int, default=60)
    parser.add_argument("--params", type=int, default=6)
    parser.add_argument("--module-lines", type=int, default=300)
    args = parser.parse_args(argv)
    rows = offenders(args.paths, args.skip, args.lines, args.params, args.module_lines)
    for path, line, name, lines, params, what in rows:
        print(f"{path}:{line} {name}  lines={lines} params={params}  ({what})")
    print(f"{len(rows)} over the limits", file=sys.stderr)
    return 1 if rows else 0


if __name__ == "__main__":
    sys.exit(main())
