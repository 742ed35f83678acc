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
