"""Find the code a pipeline names as `module.path:name` without running it: the module's
file located as a run would import it (beside the pipeline file first, then on the
Python path), read with `ast`, and the name looked up among its top-level definitions.

`compress validate` checks factories, loaders and metric functions so: a pipeline's code
runs with the user's rights, and validating a file must never run any of it. A run
imports them (core/imports.py) and says the same of what this cannot see."""
from __future__ import annotations

import ast
import importlib.machinery
import sys
from pathlib import Path

from compress.core.imports import _module_file, _shadows  # the lookup a run makes
from compress.errors import ConfigError
from runtimes.suggest import IN_BETWEEN, did_you_mean

# a module's source larger than this is not read: its names are left to the run to check
MAX_SOURCE_BYTES = 16 << 20
# values written as literals: a name bound only to one of them cannot be called
_LITERALS = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.JoinedStr)


def module_file(module_name: str, base_dir: Path) -> Path | None:
    """The file `import module_name` would run, found without importing anything (its
    parent packages included): beside the pipeline, then as `import` finds it (what is
    loaded already, then each finder of sys.meta_path: the standard library, sys.path,
    an editable install's finder). None for a module with no Python source (built in,
    frozen, compiled, in a zip): it exists, but its names cannot be read. A ConfigError
    when no such module is found."""
    beside = _module_file(module_name, base_dir)
    if beside is not None:
        return beside
    loaded = sys.modules.get(module_name)   # what `import` answers first (os.path, ...)
    if loaded is not None:
        file = getattr(loaded, "__file__", None) or ""
        return Path(file) if file.endswith(".py") else None
    path, spec = None, None
    parts = module_name.split(".")
    for depth in range(1, len(parts) + 1):
        spec = _find_spec(".".join(parts[:depth]), path)
        if spec is None or (depth < len(parts) and spec.submodule_search_locations is None):
            raise _not_found(module_name, base_dir)
        path = list(spec.submodule_search_locations or ())
    source = isinstance(spec.loader, importlib.machinery.SourceFileLoader)
    return Path(spec.origin) if source and spec.origin else None


def _find_spec(name: str, path: list | None):
    """What the first finder of sys.meta_path that knows `name` says of it: what `import`
    asks them, but without importing the parent package (`path`: its folders)."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        try:
            spec = find(name, path) if find is not None else None
        except (ImportError, ValueError, OSError):   # a finder that cannot tell: the next
            continue
        if spec is not None:
            return spec
    return None


def _not_found(module_name: str, base_dir: Path) -> ConfigError:
    beside = [p.stem for p in _python_files(base_dir)]
    hint = did_you_mean(module_name, beside, IN_BETWEEN)
    return ConfigError(f"no module '{module_name}'{hint}: looked for "
                       f"{module_name.replace('.', '/')}.py beside the pipeline file (in "
                       f"{base_dir}) and on the Python path (PYTHONPATH and the installed "
                       f"packages: {len(sys.path)} folders)")


def _python_files(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.suffix == ".py" and p.is_file())
    except OSError:
        return []


class _Names(ast.NodeVisitor):
    """The names a module binds at its top level (inside if/try/with/for blocks too, not
    inside functions or classes), each with what last bound it; `rebound`, the names a
    function declares `global` (set later, whatever the file first writes); `open` when
    the module may bind names this cannot see (`from x import *`, a module
    `__getattr__`, `globals()`: _dynamic)."""

    def __init__(self):
        self.kinds: dict[str, str] = {}
        self.rebound: set[str] = set()
        self.open = False

    def visit_FunctionDef(self, node):
        self.kinds[node.name] = "function"
        self.open |= node.name == "__getattr__"
        self.rebound.update(name for found in ast.walk(node) if isinstance(found, ast.Global)
                            for name in found.names)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self.kinds[node.name] = "class"

    def visit_Import(self, node):
        for alias in node.names:
            self.kinds[alias.asname or alias.name.split(".")[0]] = "module"

    def visit_ImportFrom(self, node):
        for alias in node.names:
            self.open |= alias.name == "*"
            self.kinds[alias.asname or alias.name] = "import"

    def visit_Assign(self, node):
        for target in node.targets:
            self.bind(target, node.value)
        self.visit(node.value)

    def visit_AnnAssign(self, node):
        if node.value is not None:   # `build: Callable` alone binds nothing
            self.bind(node.target, node.value)

    def visit_AugAssign(self, node):
        self.bind(node.target, None)

    def visit_NamedExpr(self, node):
        self.bind(node.target, node.value)

    def bind(self, target, value) -> None:
        """Every name in an assignment's target (a loop's, a `with ... as`'s)."""
        kind = "value" if isinstance(value, _LITERALS) else "assignment"
        for name in ast.walk(target):
            if isinstance(name, ast.Name):
                self.kinds[name.id] = kind


_BLOCKS = (ast.If, ast.Try, getattr(ast, "TryStar", ast.Try), ast.With, ast.For, ast.While,
           ast.ExceptHandler)


def _visit(names: _Names, node) -> None:
    """A top-level statement; an if/try/with/for block's bodies bind at the top level."""
    if not isinstance(node, _BLOCKS):
        names.visit(node)
        return
    for bound in (getattr(node, "target", None), getattr(node, "name", None)):
        if isinstance(bound, ast.AST):   # `for build in ...`
            names.bind(bound, None)
        elif isinstance(bound, str):     # `except E as build`
            names.kinds[bound] = "assignment"
    for item in getattr(node, "items", ()):   # `with ... as build`
        if item.optional_vars is not None:
            names.bind(item.optional_vars, None)
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.stmt, ast.ExceptHandler)):
            _visit(names, child)
        else:   # the test of an `if`, the iterable of a `for`: a walrus may bind there
            names.visit(child)


def _dynamic(tree: ast.Module) -> bool:
    """Whether the module may bind names at run time where no statement shows them:
    `globals()[...] = ...`, `vars()`, `sys.modules[__name__]`, anywhere in it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("globals", "vars"):
            return True
        if isinstance(node, ast.Attribute) and node.attr == "modules":
            return True
    return False


def _read_tree(file: Path, module_name: str) -> ast.Module | None:
    try:
        if file.stat().st_size > MAX_SOURCE_BYTES:
            return None
        return ast.parse(file.read_bytes(), str(file))
    except SyntaxError as exc:
        raise ConfigError(f"module '{module_name}' has a syntax error: {exc.msg} ({file}, line "
                          f"{exc.lineno})") from None
    except (OSError, ValueError) as exc:   # unreadable; a NUL byte in the source
        raise ConfigError(f"module '{module_name}' ({file}) cannot be read: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None


def check_named(spec: str, base_dir: Path, field: str) -> None:
    """`spec` (`module.path:name`) names a module that exists and a top-level name in it
    that is not a plain value; a ConfigError naming `field` otherwise. Nothing is run."""
    module_name, _, attr = spec.partition(":")
    base_dir = Path(base_dir)
    shadowed = _shadows(module_name, base_dir)
    if shadowed:
        raise ConfigError(f"the module '{module_name}' beside the pipeline file has the name "
                          f"of {shadowed}, which it would replace for the whole run. Rename "
                          f"the file (e.g. my_{module_name.split('.')[0]}.py) and the "
                          "reference to it", field=field)
    try:
        file = module_file(module_name, base_dir)
        tree = _read_tree(file, module_name) if file is not None else None
    except ConfigError as exc:
        raise ConfigError(str(exc), field=field) from None
    if tree is None:
        return
    names = _Names()
    for node in tree.body:
        _visit(names, node)
    names.open |= _dynamic(tree)
    _judge(names, attr.split(".")[0], spec, file, field)


def _judge(names: _Names, first: str, spec: str, file: Path, field: str) -> None:
    kind = names.kinds.get(first)
    if kind is None and not names.open:
        public = [n for n in names.kinds if not n.startswith("_")] or list(names.kinds)
        raise ConfigError(f"'{spec}': {file} has no top-level '{first}'"
                          f"{did_you_mean(first, public)}", field=field)
    what = {"value": "a value written in the file", "module": "a module it imports"}.get(kind)
    if what and first not in names.rebound:
        raise ConfigError(f"'{spec}': '{first}' in {file} is {what}, not something that can "
                          "be called (a function or a class)", field=field)
