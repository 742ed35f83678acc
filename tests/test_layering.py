"""The layering of DESIGN.md, enforced: `profiles` and `runtimes` import nothing from
`compress` or `export` (`profiles` reads the engine names from `runtimes`' registry);
`export` imports `runtimes` at most; `compress` sits on top.
Read from the source (every import statement, inside functions too), so a lazy import
cannot slip past."""
import ast

import pytest

from tests.conftest import REPO

ALLOWED = {"profiles": {"profiles", "runtimes"}, "runtimes": {"runtimes"},
           "export": {"export", "runtimes"},
           "compress": {"compress", "export", "runtimes", "profiles"}}


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below_it(package):
    ours = set(ALLOWED)
    wrong = sorted({f"{path.relative_to(REPO)}: {name}"
                    for path in (REPO / package).rglob("*.py")
                    for name in _imports(path)
                    if name.split(".")[0] in ours and name.split(".")[0] not in ALLOWED[package]})
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


# Where work runs is one interface (compress/executors/): the runner, the benchmark stage
# and the search reach devices, SSH and Ray only through it.
THROUGH_EXECUTORS = ("compress/runner.py", "compress/stages/benchmark.py", "compress/search.py",
                     "compress/bench_copies.py", "compress/bench_inputs.py")


@pytest.mark.parametrize("module", THROUGH_EXECUTORS)
def test_the_runner_and_the_benchmark_reach_devices_only_through_the_executors(module):
    reached = sorted(name for name in _imports(REPO / module)
                     if name.startswith(("compress.remote", "ray", "subprocess")))
    assert not reached, f"{module} reaches {reached} directly: go through compress.executors"
