"""A third-party library that fails on the user's model is the model's problem, not ours.

`blame_library("onnxruntime", what="quantize_dynamic")` wraps the places where the
pipeline hands the user's model to onnxruntime, LiteRT, ai-edge-quantizer or OpenVINO.
An exception raised from inside that library's own code becomes a ModelError (exit 2)
that names the library and its version, says the library's own words, the node, op or
tensor where they (or the library's frames) name one, and what to try. Any other
exception, one raised in our code included (a callback the library calls, a wrong
argument we passed that Python itself refuses), is left alone: a bug, exit 3.

Whose exception it is, is read from the traceback, innermost frame outwards: frames of
modules that are neither ours nor the library's (numpy, onnx, the standard library,
which the library calls) are passed over; the first frame that is ours or the library's
decides.
"""
from __future__ import annotations

import contextlib
import re
import sys
from dataclasses import dataclass

from compress.errors import CompressError, ModelError

OURS = ("compress", "export", "runtimes", "profiles")


@dataclass(frozen=True)
class Library:
    module: str        # its top-level import name: whose frames these are
    dist: str          # its pip distribution, for the version
    issues: str        # where to report a failure of its own
    remake: str        # how a model of its format is made again, differently


_ONNX = "simplify or re-export the model (onnxsim; a newer exporter or opset)"
_TFLITE = "re-export the model (a newer converter, or litert-torch from the torch model)"
LIBRARIES = {
    "onnxruntime": Library("onnxruntime", "onnxruntime",
                           "https://github.com/microsoft/onnxruntime/issues", _ONNX),
    "ai-edge-quantizer": Library(
        "ai_edge_quantizer", "ai-edge-quantizer",
        "https://github.com/google-ai-edge/ai-edge-quantizer/issues", _TFLITE),
    "LiteRT": Library("ai_edge_litert", "ai-edge-litert",
                      "https://github.com/google-ai-edge/LiteRT/issues", _TFLITE),
    "OpenVINO": Library("openvino", "openvino",
                        "https://github.com/openvinotoolkit/openvino/issues", _ONNX),
}


@contextlib.contextmanager
def blame_library(*names: str, what: str, hint: str = ""):
    """Turn an exception from inside one of the libraries `names` (keys of LIBRARIES)
    into a ModelError about `what` (the call: "quantize_static"); `hint`: what to try
    at this call site (a setting of the stage). Usable as a decorator too."""
    try:
        yield
    except (CompressError, ImportError):  # ours already; a broken install, not the model
        raise
    except Exception as exc:  # noqa: BLE001 - whose it is decides, below
        name = raised_inside(exc, names)
        if name is None:
            raise
        raise ModelError(explain(name, exc, what, hint)) from exc


def raised_inside(exc: BaseException, names) -> str | None:
    """The one of `names` whose code raised `exc`, or None when ours (or nobody's of
    those) did."""
    tops = {LIBRARIES[name].module: name for name in names}
    for frame in reversed(_frames(exc)):
        top = _top(frame)
        if top in tops:
            return tops[top]
        if top in OURS:
            return None
    return None


def _frames(exc: BaseException) -> list:
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _top(frame) -> str:
    return (frame.f_globals.get("__name__") or "").split(".")[0]


def explain(name: str, exc: BaseException, what: str, hint: str = "") -> str:
    """The message: who failed where, in its words, and what to try."""
    library = LIBRARIES[name]
    at = where(str(exc)) or _from_frames(exc, library.module)
    try_this = f"{hint}; " if hint else ""
    return (f"{name} {version(library)} failed on this model ({what})"
            f"{f' at {at}' if at else ''}: {said(exc)}. This is {name}'s failure on "
            f"this model, not a bug in edge-compress. Try: {try_this}{library.remake}; "
            f"or report it to {name} ({library.issues}) with the model and this message")


def version(library: Library) -> str:
    found = getattr(sys.modules.get(library.module), "__version__", None)
    if found:
        return str(found).split("-")[0]
    from importlib import metadata
    try:
        return metadata.version(library.dist)
    except metadata.PackageNotFoundError:
        return "(version unknown)"


# Lines of the libraries' messages that say where in their C++ it failed, not what:
# onnxruntime's status prefix, OpenVINO's "Check 'x' failed at file.cpp:N:" and its API
# wrapper's line.
_NOISE = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : |^Check '.*' failed at \S+:\d+:?\s*$|"
                    r"^FrontEnd API failed with \w+:?\s*$|^\S+\.(cc|cpp|h):\d+\S*\s*")


def said(exc: BaseException) -> str:
    """The library's own words: its message without C++ locations, on one line."""
    lines = [_NOISE.sub("", line).strip() for line in str(exc).splitlines()]
    text = " ".join(line for line in lines if line).rstrip(". ") or "(no message)"
    return f"{type(exc).__name__}: {text[:400]}{'...' if len(text) > 400 else ''}"


# Where the libraries' messages name a node, an op or a tensor (first match wins):
# onnxruntime's "Node (name) Op (type)" and "node with name 'x'", OpenVINO's
# "<Node(MatMul): y>" and "No conversion rule found for operations: Det-17", and the
# generic "node name: x", "op_type: x", "tensor 'x'".
_WHERE = [
    (re.compile(r"Node \((?P<node>[^)]*)\) Op \((?P<op>\w+)\)"), "node '{node}' ({op})"),
    (re.compile(r'In Node, \("(?P<node>[^"]*)", (?P<op>[\w.]+)'), "node '{node}' ({op})"),
    (re.compile(r"node with name '(?P<node>[^']*)'"), "node '{node}'"),
    (re.compile(r"<Node\((?P<op>\w+)\): (?P<node>[^>]+)>"), "node '{node}' ({op})"),
    (re.compile(r"operations: (?P<ops>\w+-\d+(?:, \w+-\d+)*)"), "op {ops}"),
    (re.compile(r"(?:in node|node name)[:=]?\s*[('\"]?(?P<node>[\w./:-]+)", re.I),
     "node '{node}'"),
    (re.compile(r"op_type[:=]?\s*'?(?P<op>\w+)"), "op {op}"),
    (re.compile(r"tensor name[:=]?\s*'?(?P<tensor>[^'\s,]+)", re.I), "tensor '{tensor}'"),
    (re.compile(r"tensor\s*'(?P<tensor>[^']+)'", re.I), "tensor '{tensor}'"),
]


def where(message: str) -> str:
    """The node, op or tensor the message names, or ''."""
    for pattern, text in _WHERE:
        found = pattern.search(message)
        if found:
            return text.format(**found.groupdict())
    return ""


def _from_frames(exc: BaseException, module: str) -> str:
    """The node (an ONNX NodeProto in a local named `node`) and tensor (`weight_name`,
    `tensor_name`) the library was working on when it failed, from its own frames,
    innermost first; '' when none holds one."""
    node = tensor = None
    for frame in reversed(_frames(exc)):
        if _top(frame) != module:
            continue
        local = frame.f_locals
        found = local.get("node")
        if node is None and isinstance(getattr(found, "op_type", None), str):
            node = (f"node '{found.name}' ({found.op_type})" if found.name
                    else f"an unnamed {found.op_type} node")
        for key in ("weight_name", "tensor_name"):
            if tensor is None and isinstance(local.get(key), str):
                tensor = f"tensor '{local[key]}'"
    return ", ".join(part for part in (node, tensor) if part)
