"""The layering of DESIGN.md, enforced, read from the source (every import statement,
inside functions too, so a lazy import cannot slip past):

- the top-level packages: `profiles` and `runtimes` import nothing from `compress` or
  `export` (`profiles` reads the engine names from `runtimes`' registry); `export`
  imports `runtimes` at most; `compress` sits on top;
- inside `compress`, the wings in one order (WINGS, lowest first): a wing imports only
  the wings below it, the leaves (`errors`, `stagebase`) import no wing, and only the
  entry points (`api`, `cli`, the package itself) sit above every wing;
- no import cycle between modules, anywhere.
"""
import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

ALLOWED = {"profiles": {"profiles", "runtimes"}, "runtimes": {"runtimes"},
           "export": {"export", "runtimes"},
           "compress": {"compress", "export", "runtimes", "profiles"}}

# compress/'s wings, lowest first: the one place their order is written.
WINGS = ("core", "data", "model", "quant", "measure", "report", "stages", "config",
         "runner", "search")
# import no wing; every wing may import them; lowest first (stagebase raises errors')
LEAVES = ("errors", "stagebase")
ENTRY_POINTS = ("__init__", "__main__", "api", "cli")   # above every wing


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_of(path): path for package in ALLOWED for path in (REPO / package).rglob("*.py")}


def _imported_modules(path):
    """The modules an import names: `from a import b` names a.b where that is a module
    (a submodule imported), else a."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield full if full in MODULES else node.module


def _graph() -> dict[str, set[str]]:
    """module -> the modules of this repository it imports."""
    graph = {}
    for module, path in MODULES.items():
        found = set()
        for name in _imported_modules(path):
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
        graph[module] = found
    return graph


GRAPH = _graph()


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below_it(package):
    ours = set(ALLOWED)
    wrong = sorted({f"{path.relative_to(REPO)}: {name}"
                    for path in (REPO / package).rglob("*.py")
                    for name in _imports(path)
                    if name.split(".")[0] in ours and name.split(".")[0] not in ALLOWED[package]})
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def _rank(module: str) -> float:
    """Where a compress module stands: a leaf below every wing, a wing by its place in
    WINGS, an entry point above them all."""
    part = module.split(".")[1] if "." in module else "__init__"
    if part in LEAVES:   # below every wing, in LEAVES' order
        return -len(LEAVES) + LEAVES.index(part)
    if part in ENTRY_POINTS:
        return len(WINGS)
    return WINGS.index(part)


def test_compress_has_only_its_wings_leaves_and_entry_points_at_its_top():
    top = {path.stem if path.is_file() else path.name
           for path in (REPO / "compress").iterdir()
           if path.name != "__pycache__" and (path.suffix == ".py" or path.is_dir())}
    assert top == set(WINGS) | set(LEAVES) | set(ENTRY_POINTS)


def test_every_wing_opens_with_a_map_of_its_modules():
    for wing in WINGS:
        doc = ast.get_docstring(ast.parse((REPO / "compress" / wing / "__init__.py").read_text()))
        modules = [p.name for p in (REPO / "compress" / wing).iterdir()
                   if p.name != "__init__.py" and (p.suffix == ".py" or (p / "__init__.py").exists())]
        missing = [m for m in modules if m.removesuffix(".py") not in (doc or "")]
        assert doc and not missing, f"compress/{wing}/__init__.py's map lacks {missing}"


def _package_inits():
    """Every package with a map: those inside compress's wings, and every package of
    runtimes, export and profiles (compress/'s own map is its wings, above)."""
    yield from sorted((REPO / "compress").glob("*/*/**/__init__.py"))
    for top in ("runtimes", "export", "profiles"):
        yield from sorted((REPO / top).glob("**/__init__.py"))


def test_every_package_inside_a_wing_opens_with_a_map_of_its_modules():
    for init in _package_inits():
        folder = init.parent
        doc = ast.get_docstring(ast.parse(init.read_text()))
        modules = [p.name for p in folder.iterdir()
                   if p.name != "__init__.py" and (p.suffix == ".py" or (p / "__init__.py").exists())]
        missing = [m for m in modules if m.removesuffix(".py") not in (doc or "")]
        assert doc and not missing, f"{init.relative_to(REPO)}'s map lacks {missing}"


def test_a_wing_imports_only_the_wings_below_it():
    wrong = sorted(f"{module} -> {other}"
                   for module, others in GRAPH.items() if module.startswith("compress.")
                   for other in others if other.startswith("compress.")
                   and _rank(other) >= _rank(module)
                   and other.split(".")[1] != module.split(".")[1]
                   and not _rank(other) == _rank(module) == len(WINGS))
    assert not wrong, "imports from a wing to one above it (or level with it):\n" + "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others():
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# Where work runs is one interface (compress/measure/places.py, fleet.py, dispatch.py and
# the search's executors): the runner, the benchmark stage and the search reach devices,
# SSH and Ray only through it.
THROUGH_EXECUTORS = ("compress/runner/run.py", "compress/runner/produce.py",
                     "compress/stages/benchmark.py",
                     "compress/search/driver.py", "compress/measure/copies.py",
                     "compress/measure/inputs.py")


@pytest.mark.parametrize("module", THROUGH_EXECUTORS)
def test_the_runner_and_the_benchmark_reach_devices_only_through_the_executors(module):
    reached = sorted(name for name in _imports(REPO / module)
                     if name.startswith(("compress.measure.remote", "ray", "subprocess")))
    assert not reached, (f"{module} reaches {reached} directly: go through the places "
                         "(compress.measure) and the search's executors")
