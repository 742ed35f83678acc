"""ONNX files from any exporter: load and save them with their external data, raise their
opset to what the QDQ quantizer needs, and check that onnxruntime runs what a stage made.

quantize_static writes per-channel DequantizeLinear(axis=...) (opset 13) into a model at any
opset; at opset 12 (ddddocr's OCR model, older exporters) onnxruntime then refuses the file,
and a generic "truncated?" hint sent users after a damaged file. Here every failure is one
ModelError that names the op, the node, the opset and the fix.
"""
from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

from compress.errors import ModelError
from compress.core.lazy import require

if TYPE_CHECKING:
    import onnx

# protobuf cannot hold, or even measure, a message over 2 GiB: above it the weights go to
# a file of their own
INLINE_LIMIT = 2 ** 31
# initializers this big leave the model while onnx's version converter runs: it serialises
# the whole model (over 2 GiB it cannot) and reads only small tensors (axes, scales, shapes)
_DETACH_BYTES = 1 << 16
DEFAULT_DOMAINS = ("", "ai.onnx")

# The opsets quantize_static's QDQ output needs, measured with onnxruntime 1.32 on Conv/Gemm/
# MatMul graphs at opsets 7-13 (tests/compress/model/test_onnx_compat.py):
# - 8-bit per tensor: Q/DQ exist from opset 10 and such a model at 10 loads, but
#   quantize_static lifts < 10 to 11 itself, warns at 10 that fusions need 11 and quantizes
#   Pad/Resize only from 11: ask for 11, so that the lift happens here, with clear errors.
# - 8-bit per channel: DequantizeLinear(axis=...) needs 13, and quantize_static does not
#   lift the opset for it: at 10-12 onnxruntime refuses the file.
# - 16-bit activations or weights: Q/DQ take (u)int16 from 21, and quantize_static lifts the
#   model to 21 itself (with UseQDQContribOps too; its Q/DQ are then com.microsoft ops).
_PER_TENSOR, _PER_CHANNEL, _SIXTEEN_BIT = 11, 13, 21


def needed_opset(per_channel: bool, activations: str = "uint8", weights: str = "int8") -> int:
    """The smallest default-domain opset at which quantize_static's QDQ model loads; types
    as the quantize stage names them (uint8, int8, uint16, int16)."""
    for name in (activations, weights):
        if name not in ("uint8", "int8", "uint16", "int16"):
            raise ValueError(f"unknown quantization type {name!r}")
    if "16" in activations + weights:
        return _SIXTEEN_BIT
    return _PER_CHANNEL if per_channel else _PER_TENSOR


def opset_of(model: onnx.ModelProto) -> int:
    """The model's default-domain ("" or "ai.onnx") opset."""
    versions = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions:
        raise ModelError("the model imports no default-domain ONNX opset (its opset_import "
                         f"has {[o.domain for o in model.opset_import]}); re-export it")
    return max(versions)


def load_onnx(path) -> onnx.ModelProto:
    """The model with its external data (tensors kept in files next to it) read in."""
    require("onnx", "loading an ONNX model")
    from onnx.external_data_helper import load_external_data_for_model
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"ONNX model not found: {path}")
    model = parse_header(path)
    problem = external_problem(model, path)
    if problem:
        raise ModelError(problem)
    try:
        load_external_data_for_model(model, str(path.parent))
    except Exception as exc:  # noqa: BLE001 - e.g. a location outside the model's folder
        raise ModelError(f"cannot read the external data of {path}: {_one_line(exc)}. Keep "
                         "the data files the model names in its own folder") from None
    return model


def read_graph(path):
    """The model at `path` without its large weights' data, and where those lie
    (compress.model.onnx_file.Header), read without loading them; a ModelError for a
    file that is not ONNX or external data that is missing, short or outside its folder."""
    require("onnx", "reading an ONNX model")
    from compress.model.onnx_file import read_header
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"ONNX model not found: {path}")
    try:
        header = read_header(path)
    except ModelError:   # not protobuf, found at the first bad byte: onnx.load reads it all
        raise
    except Exception:  # noqa: BLE001 - external data the reader cannot place
        # read it whole instead (load_onnx parses it once, and says what is wrong with it)
        from compress.model.onnx_file import Header
        return Header(load_onnx(path), {}, path.resolve())
    if any(span.path != header.path for span in header.spans.values()):
        problem = external_problem(parse_header(path), path)  # a small file: data is apart
        if problem:
            raise ModelError(problem)
    folder = path.parent.resolve()
    outside = [s.path for s in header.spans.values()
               if not s.path.resolve().is_relative_to(folder)]
    if outside:
        raise ModelError(f"cannot read the external data of {path}: {outside[0]} is outside "
                         "the model's folder. Keep the data files the model names in its "
                         "own folder")
    return header


def copy_onnx(path, target) -> onnx.ModelProto:
    """The ONNX file at `path` (external data and all) written to `target` as save_onnx
    writes it once load_onnx has read it (under 2 GiB byte for byte the same file), one
    tensor at a time: the weights are never all in memory (a 1 GB model took 2.1 GB
    loaded and saved whole). Returns the model without its large weights' data."""
    from compress.model.onnx_file import write_model
    header = read_graph(path)
    try:
        write_model(header.model, header.spans, target)
    except OSError as exc:
        raise ModelError(f"cannot write the ONNX model to {target}: {_one_line(exc)}") from None
    return header.model


def save_onnx(model: onnx.ModelProto, path) -> None:
    """One self-contained file under 2 GiB; above, the weights go to `<name>.data` beside it
    (named relatively: the .onnx may be renamed, the .data may not). A failure leaves
    neither file behind; `model` keeps its weights either way."""
    onnx = require("onnx", "saving an ONNX model")
    path = Path(path)
    data = path.with_name(path.name + ".data")
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in _tensors(model.graph)):
        raise ModelError(f"cannot save the model to {path}: some tensors still live in "
                         "external data files; read it with load_onnx first")
    try:
        inline = model.ByteSize() < INLINE_LIMIT
    except Exception:  # noqa: BLE001 - upb refuses to measure a message over 2 GiB
        inline = False
    data.unlink(missing_ok=True)  # onnx appends to an existing data file
    held = [] if inline else [(t, t.raw_data) for t in _tensors(model.graph) if t.raw_data]
    try:
        onnx.save_model(model, str(path), save_as_external_data=not inline,
                        all_tensors_to_one_file=True, location=data.name, size_threshold=1024,
                        convert_attribute=False)
    except Exception as exc:  # noqa: BLE001 - disk full, no permission
        path.unlink(missing_ok=True)
        data.unlink(missing_ok=True)
        raise ModelError(f"cannot write the ONNX model to {path}: {_one_line(exc)}") from None
    finally:  # saving externally moved the bytes out of `model`: put them back
        for tensor, raw in held:
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                tensor.raw_data = raw
                del tensor.external_data[:]
                tensor.data_location = onnx.TensorProto.DEFAULT


def upgrade_opset(model: onnx.ModelProto, minimum: int) -> tuple[onnx.ModelProto, dict | None]:
    """(model, None) when its opset is at least `minimum`; else the model converted to
    `minimum` by onnx's version converter and {"from": old, "to": minimum}. Other domains
    (com.microsoft, ...) stay as they are."""
    onnx = require("onnx", "upgrading an ONNX model's opset")
    old = opset_of(model)
    if old >= minimum:
        return model, None
    unknown = sorted({n.op_type for n in _nodes(model.graph)
                      if n.domain in DEFAULT_DOMAINS and not onnx.defs.has(n.op_type)})
    if unknown:  # the converter would stop on them with a garbled assertion
        raise ModelError(
            f"cannot upgrade the model from opset {old} to {minimum}: {', '.join(unknown)} is "
            "not an ONNX op (an experimental op ONNX dropped, or another framework's), so "
            f"onnx's version converter has no rule for it. Fix: re-export the model at opset "
            f"{minimum} or newer, without it")
    with _detached_weights(model) as weights:
        try:
            new = onnx.version_converter.convert_version(model, minimum)
        except Exception as exc:  # noqa: BLE001 - C++ assertions as RuntimeError, ConvertError
            raise _conversion_error(model, old, minimum, exc) from None
    for tensor in new.graph.initializer:
        if tensor.name in weights and not tensor.raw_data:
            tensor.raw_data = weights[tensor.name]
    # an old IR version (3 for opset 7) is below what the new opset asks for
    new.ir_version = max(new.ir_version, onnx.helper.find_min_ir_version_for(
        list(new.opset_import), ignore_unknown=True))
    return new, {"from": old, "to": minimum}


def _one_line(exc) -> str:
    return " ".join(str(exc).split())[:400]


def parse_header(path: Path):
    """The model's protobuf without external data; only a file that onnx cannot parse is
    called truncated."""
    onnx = require("onnx", "loading an ONNX model")
    from compress.model.onnx_file import NO_GRAPH, not_onnx, unparsed
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise unparsed(path, _one_line(exc)) from None
    if not model.HasField("graph"):
        raise not_onnx(path, NO_GRAPH)
    return model


def _graphs(graph):
    """The graph and its subgraphs (If, Loop, Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _graphs(sub)


def _nodes(graph):
    return (node for sub in _graphs(graph) for node in sub.node)


def _tensors(graph):
    """Initializers and tensor attributes (Constant values), subgraphs included."""
    for sub in _graphs(graph):
        yield from sub.initializer
        for attr in (a for node in sub.node for a in node.attribute):
            yield from ([attr.t] if attr.HasField("t") else []) + list(attr.tensors)


def external_problem(model, path: Path) -> str | None:
    """Which external data file is missing or shorter than the model says, if one is."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data
    for tensor in filter(uses_external_data, _tensors(model.graph)):
        info = ExternalDataInfo(tensor)
        data = path.parent / info.location
        if not data.is_file():
            return (f"{path} keeps tensor '{tensor.name}' in the external data file {data}, "
                    "which is missing: copy it next to the model (an .onnx file and its data "
                    "files travel together)")
        end = (info.offset or 0) + (info.length or 0)
        if end > data.stat().st_size:
            return (f"the external data file {data} of {path} is shorter than the model says "
                    f"({data.stat().st_size} bytes; tensor '{tensor.name}' ends at byte "
                    f"{end}): the copy is truncated, copy it again")
    return None


@contextlib.contextmanager
def _detached_weights(model):
    """Lift the large initializers' bytes out of `model` for a while: {name: bytes}."""
    held = [(t, t.raw_data) for t in model.graph.initializer if len(t.raw_data) >= _DETACH_BYTES]
    for tensor, _ in held:
        tensor.ClearField("raw_data")
    try:
        yield {tensor.name: raw for tensor, raw in held}
    finally:
        for tensor, raw in held:
            tensor.raw_data = raw


def _conversion_error(model, old: int, new: int, exc) -> ModelError:
    """Name the op the converter failed on: the ops its message names, else the model's ops
    that change at the one-opset step that fails."""
    onnx = require("onnx", "upgrading an ONNX model's opset")
    step, said, current = None, str(exc), model
    for version in range(old, new):
        try:
            current = onnx.version_converter.convert_version(current, version + 1)
        except Exception as step_exc:  # noqa: BLE001
            step, said = version, str(step_exc)
            break
    ops = sorted({n.op_type for n in _nodes(model.graph) if n.domain in DEFAULT_DOMAINS})
    named = [op for op in ops if re.search(rf"\b{op}\b|adapt_{op.lower()}_", str(exc) + said)]
    changed = (lambda s: s.since_version == step + 1) if step else None
    suspects = named or [op for op in ops if changed and first_opset(op, step, changed)]
    nodes = {n.op_type: n.name for n in reversed(list(_nodes(model.graph)))}
    where = ", ".join(f"{op} (node '{nodes[op]}')" for op in suspects[:3]) or "a node"
    between = f" between opset {step} and {step + 1}" if step else ""
    reason = re.sub(r"^.*?Assertion `.*?` failed: ", "", _one_line(said)).rstrip(". ")
    return ModelError(
        f"cannot upgrade the model from opset {old} to {new}: onnx's version converter fails "
        f"on {where}{between}: {reason}. Fix: re-export the model at opset {new} or newer")


def first_opset(op: str, after: int, test, domain: str = "") -> int | None:
    """The first opset after `after` at which the default domain's `op` passes `test`."""
    onnx = require("onnx", "explaining an ONNX error")
    if domain not in DEFAULT_DOMAINS or not onnx.defs.has(op):
        return None
    for version in range(after + 1, onnx.defs.onnx_opset_version() + 1):
        with contextlib.suppress(onnx.defs.SchemaError):
            if test(onnx.defs.get_schema(op, version)):
                return version
    return None
