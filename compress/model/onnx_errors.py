"""Why onnxruntime refuses an ONNX model, said plainly: `check_runs` opens a model as a
benchmark would and runs one feed; when that fails, the message names the op, the node,
the model's opset, the first opset that would take it, and the fix, from onnxruntime's
own words (which alone often blame the wrong thing)."""
from __future__ import annotations

import re
from pathlib import Path

from compress.errors import ModelError
from compress.core.lazy import require
from compress.model.onnx_compat import DEFAULT_DOMAINS, external_problem, first_opset, parse_header
from runtimes.onnx_session import session_options


def check_runs(path, feeds: list[dict], what: str) -> None:
    """Open `path` with onnxruntime's CPU provider, all graph optimisations on (as a
    benchmark does), and run the first of `feeds`; a ModelError led by `what` if that fails:
    a whole phrase ("stage 2 (quantize) made a model that onnxruntime cannot load"), or one
    ending in "that", which gets "onnxruntime cannot load" (or "run") added."""
    ort = require("onnxruntime", "checking an ONNX model")
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{what}: {path} does not exist")
    options = session_options()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 4  # its own error log would repeat what the ModelError says
    phase = "load"
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        phase = "run"
        if feeds:
            session.run(None, dict(feeds[0]))
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
        lead = f"{what} onnxruntime cannot {phase}" if what.endswith(" that") else what
        raise ModelError(f"{lead}: {_explain(path, exc, ort.__version__)}") from None


def _explain(path: Path, exc, version: str) -> str:
    """What went wrong, from onnxruntime's message and the file: op, node, opset, fix."""
    said = " ".join(str(exc).split())
    said = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : |Load model from .*? failed:\s*|"
                  r"This is an invalid model\.\s*|/onnxruntime_src/\S+:\d+ (.*? was false\. "
                  r"|[^(]*\([^)]*\) )", "", said).strip()  # status prefix, C++ locations
    try:
        header = parse_header(path)
    except ModelError as error:
        return str(error)
    problem = external_problem(header, path)
    if problem:
        return problem
    opset = max([o.version for o in header.opset_import if o.domain in DEFAULT_DOMAINS] or [0])
    for pattern, explain in _PATTERNS:
        found = re.search(pattern, said)
        if found:
            groups = {k: (v or "").rstrip(". ") for k, v in found.groupdict().items()}
            text = explain(groups, opset) if callable(explain) else explain.format(**groups)
            break
    else:
        text = ("onnxruntime cannot load or run it. Fix: check it with onnx.checker.check_model("
                "path, full_check=True), or re-export it")
    return f"{path} (opset {opset}): {text}. onnxruntime {version} said: {said[:400]}"


def _upgrade_to(first: int) -> str:
    return (f"Fix: upgrade the float model to opset {first} or newer before this stage "
            f"(compress.model.onnx_compat.upgrade_opset), or re-export it at opset {first} or newer")


def _in_node(g: dict, opset: int) -> str:
    """onnx's checker inside onnxruntime refused a node: an attribute, an op, a version."""
    op, why, at = g["op"], g["why"], f"node '{g['node']}' ({g['op']})"
    attr = re.match(r"Unrecognized attribute: (\w+)", why)
    if attr:
        first = first_opset(op, opset, lambda s: attr[1] in s.attributes, g["domain"])
        note = " (per-channel quantization writes it)" if attr[1] == "axis" else ""
        if first:
            return (f"{at} has attribute '{attr[1]}'{note}, which {op} takes only from opset "
                    f"{first}. " + _upgrade_to(first))
        return (f"{at} has attribute '{attr[1]}', which {op} does not take at this opset. "
                "Fix: re-export the model")
    first = first_opset(op, 0, bool, g["domain"])
    if why.startswith("No Op registered") and first and first > opset:
        return f"{at}: {op} exists only from opset {first}. " + _upgrade_to(first)
    if "deprecated" in why:
        return (f"{at}: ONNX removed {op} at or before opset {opset}. Fix: re-export the "
                "model; its exporter should write the op that replaced it")
    if first is None and g["domain"] in DEFAULT_DOMAINS:
        return f"{at}: {op} is not an ONNX op. Fix: re-export the model with standard ops"
    return f"{at}: {why}. Fix: re-export the model with ops its opset defines"


def _type_error(g: dict, opset: int) -> str:
    op, kind = g["op"], g["type"]
    first = first_opset(op, opset, lambda s: any(kind in c.allowed_type_strs
                                                  for c in s.type_constraints))
    at = f"node '{g['node']}' ({op}): input '{g['input']}' is {kind}"
    if first:
        return f"{at}, which {op} takes only from opset {first}. " + _upgrade_to(first)
    return f"{at}, which {op} does not take. Fix: keep this node in float32, or cast its input"


# (pattern in onnxruntime's message, explanation: a template for its groups, or a function
# of the groups and the model's opset)
_PATTERNS = [
    (r'In Node, \("(?P<node>[^"]*)", (?P<op>[\w.]+), "(?P<domain>[^"]*)", -?\d+\) : .*?\s,'
     r"\s*Error (?P<why>.+)", _in_node),
    (r"Type Error: Type '(?P<type>[^']*)' of input parameter \((?P<input>[^)]*)\) of operator "
     r"\((?P<op>\w+)\) in node \((?P<node>[^)]*)\)", _type_error),
    (r"Could not find an implementation for (?P<op>\w+)\((?P<version>\d+)\) node with name "
     r"'(?P<node>[^']*)'",
     "node '{node}' ({op}, version {version} of the op): onnxruntime's CPU provider has no "
     "kernel for it with this node's tensor types (float16, bfloat16 and 16-bit integers are "
     "the usual gaps). Fix: keep this node in float32 (exclude it from quantization), or "
     "upgrade the opset if a newer {op} takes these types"),
    (r"Node \((?P<node>[^)]*)\) Op \((?P<op>\w+)\) \[(?P<kind>\w+)\] (?P<why>.+)",
     "node '{node}' ({op}): {kind}: {why}. Fix: check the input shapes the model declares, or "
     "re-export it"),
    (r"(?P<domain>[\w.]*):(?P<op>\w+)\(-?\d+\) is not a registered function/op",
     "{op} (domain '{domain}') is not an op this onnxruntime knows. Fix: register the custom-op "
     "library that implements it, or re-export the model without it"),
    (r"Opset (?P<opset>\d+) is under development.*?till opset (?P<max>\d+)",
     "its opset {opset} is newer than this onnxruntime supports (up to {max}). Fix: re-export "
     "it at opset {max} or older, or upgrade onnxruntime"),
    (r"running (?P<op>\w+) node\. Name:'(?P<node>[^']*)' Status Message: (?P<why>.+)",
     "node '{node}' ({op}) fails on the first input: {why}. Fix: if the float model runs on "
     "this input, the stage broke this node; else give inputs the model expects"),
    (r"(?P<why>Required inputs.*|Got invalid dimensions.*|Unexpected input data type.*|"
     r"Invalid Feed Input Name.*|Invalid rank for input.*)",
     "the first input does not fit the model: {why}. Fix: give inputs with the names, shapes "
     "and dtypes the model declares"),
]
