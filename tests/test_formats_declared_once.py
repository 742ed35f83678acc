"""Each artifact format is declared once, in runtimes/formats.py (its kind, the engines
that open it, the stage that makes its baseline, how its size is counted, how it ships),
and every other module reads that row:

- no other module writes a table of formats: a literal tuple, list or set of two or more
  format names, or a dict whose keys are format names and whose values are facts (names,
  numbers, tuples of them) rather than code (a backend per format is code: allowed);
- every format name a module compares a format with (`x.format == "onnx"`,
  `fmt in (...)`, a stage's `{"torch": "onnx"}`) is a row of the table: a typo or a
  format nobody declared fails here, not in a user's run;
- the language-model source's field (`causal_lm`) is named only in the modules listed in
  CAUSAL_LM_MODULES: every other place asks the table (`formats.is_language`,
  `ModelSpec.language`).
"""
import ast
from pathlib import Path

import pytest

from runtimes import formats
from tests.conftest import REPO

PACKAGES = ("compress", "export", "runtimes", "profiles")
TABLE = REPO / "runtimes" / "formats.py"
NAMES = set(formats.names())
# the model wing (the source as given), the language-model formats' export stages and
# the language-model quantizers: where the source's own field is the subject
CAUSAL_LM_MODULES = ("compress/model/", "compress/quant/lm/",
                     *(f"compress/stages/export_{n}.py" for n in formats.names(
                         formats.LANGUAGE, baseline=True)))


def _modules():
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if path != TABLE:
                yield path, ast.parse(path.read_text(), str(path))


def _names_in(nodes) -> set[str]:
    return {n.value for n in nodes if isinstance(n, ast.Constant) and n.value in NAMES}


def _is_fact(node) -> bool:
    """A value that states a fact (a constant, or a tuple of constants), not code."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(isinstance(e, ast.Constant) for e in node.elts)
    return isinstance(node, ast.Constant)


def _tables(tree) -> list[int]:
    """Lines where a module lists formats, or maps them to facts."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            constants = [e for e in node.elts if isinstance(e, ast.Constant)]
            if len(_names_in(constants)) >= 2 and len(constants) == len(node.elts) \
                    and all(c.value in NAMES for c in constants):
                found.append(node.lineno)
        elif isinstance(node, ast.Dict) and len(_names_in(node.keys)) >= 2:
            keys_all_formats = all(isinstance(k, ast.Constant) and k.value in NAMES
                                   for k in node.keys)
            if keys_all_formats and all(_is_fact(v) for v in node.values):
                found.append(node.lineno)
    return found


def _format_operand(node) -> bool:
    """An expression that holds a format's name: `x.format`, `fmt`, `given`..."""
    return (isinstance(node, ast.Attribute) and node.attr == "format") or \
        (isinstance(node, ast.Name) and node.id in ("fmt", "format_name"))


def _compared_names(tree) -> list[tuple[int, str]]:
    """(line, string) for every string a format expression is compared with."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and _format_operand(node.left):
            for right in node.comparators:
                items = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) \
                    else [right]
                found += [(node.lineno, i.value) for i in items
                          if isinstance(i, ast.Constant) and isinstance(i.value, str)]
        elif isinstance(node, ast.FunctionDef) and node.name == "formats":
            for inner in ast.walk(node):   # a stage's {format it takes: format it makes}
                if isinstance(inner, ast.Dict):
                    found += [(inner.lineno, k.value) for k in [*inner.keys, *inner.values]
                              if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return found


def test_no_module_but_the_table_lists_formats_or_maps_them_to_facts():
    wrong = [f"{path.relative_to(REPO)}:{line}" for path, tree in _modules()
             for line in _tables(tree)]
    assert not wrong, ("format names listed or mapped outside runtimes/formats.py (read "
                       "its rows instead):\n" + "\n".join(wrong))


def test_every_format_compared_with_is_a_row_of_the_table():
    wrong = [f"{path.relative_to(REPO)}:{line}: {name!r}" for path, tree in _modules()
             for line, name in _compared_names(tree) if name not in NAMES]
    assert not wrong, "formats no row declares:\n" + "\n".join(wrong)


def test_the_checks_find_what_they_look_for():
    listed = ast.parse('KINDS = ("onnx", "tflite")\nENGINE = {"onnx": "ort", "gguf": "l"}\n'
                       'BACKENDS = {"onnx": Onnx(), "tflite": Tflite()}')
    assert _tables(listed) == [1, 2]          # the backends, code per format, pass
    compared = ast.parse('if out.format == "tflte": pass\n'
                         'def formats(self):\n    return {"torch": "onxx"}')
    assert sorted(name for _, name in _compared_names(compared)) == ["onxx", "tflte", "torch"]


def _names_causal_lm(tree) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        named = ((isinstance(node, ast.Attribute) and node.attr == "causal_lm")
                 or (isinstance(node, ast.Name) and node.id == "causal_lm")
                 or (isinstance(node, ast.Constant) and node.value == "causal_lm")
                 or (isinstance(node, (ast.Import, ast.ImportFrom)) and "causal_lm" in
                     " ".join([getattr(node, "module", None) or "",
                               *(a.name for a in node.names)])))
        if named:
            lines.append(node.lineno)
    return lines


def test_the_language_model_source_is_named_only_where_it_is_the_subject():
    wrong = [f"{path.relative_to(REPO)}:{line}" for path, tree in _modules()
             if not str(path.relative_to(REPO)).startswith(CAUSAL_LM_MODULES)
             for line in _names_causal_lm(tree)]
    assert not wrong, ("the causal_lm source named outside "
                       f"{', '.join(CAUSAL_LM_MODULES)}; ask the format table "
                       "(formats.is_language, ModelSpec.language):\n" + "\n".join(wrong))


@pytest.mark.parametrize("row", formats.FORMATS, ids=lambda row: row.name)
def test_each_row_is_complete(row):
    from compress.stagebase import STAGES
    import compress.stages  # noqa: F401  (registers every stage)
    assert row.kind in (formats.TENSOR, formats.LANGUAGE)
    if row.deployable:
        assert row.size is not None and row.accepts is not None
    if row.made_by is not None:    # the stage exists and turns made_from into this format
        stage = STAGES[row.made_by].config_cls.model_construct()
        assert stage.formats().get(row.made_from) == row.name
    if row.baseline:
        assert row.made_by and formats.get(row.made_from).given
