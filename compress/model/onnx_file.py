"""An ONNX file's weights one tensor at a time: the graph without its weights (a few KB,
the "header"), where each weight's bytes lie (its span: a file, an offset, a length),
and a writer that puts header and spans back together into one file.

Loading a model with onnx and saving it again holds the weights two or three times
(the parsed message, the serialised bytes, numpy copies). Here a weight's bytes are read
only when a caller asks for that one tensor, and written by copying file to file, so a
model of any size is read and written in a few MB beyond the tensor being worked on.

Both layouts are read: weights inline in the .onnx (raw_data, found by walking the
protobuf wire format without parsing the payloads: protobuf_wire.py) or in external data
files.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compress.errors import ModelError
from compress.model.protobuf_wire import WireError, encode_varint, fields as _fields

# Field numbers in onnx.proto: ModelProto.graph, GraphProto.initializer, TensorProto.raw_data
_GRAPH, _INITIALIZER, _RAW_DATA = 7, 5, 9
# protobuf cannot hold a message of 2 GiB or more: above it the weights stay external
INLINE_LIMIT = 2 ** 31
# weights at least this big leave the header (smaller ones are cheaper kept in it)
MIN_SPAN_BYTES = 1024
_ALIGN = 4096       # external tensors start on a page, as onnx writes them
_CHUNK = 16 << 20   # bytes copied at a time
NO_GRAPH = "it holds no graph (an empty or non-ONNX file)"


@dataclass(frozen=True)
class Span:
    """Where a tensor's bytes lie."""
    path: Path
    offset: int
    length: int


@dataclass
class Header:
    """A model whose large initializers carry no data (dims and type only), and their
    spans by name."""
    model: object        # onnx.ModelProto
    spans: dict
    path: Path

    def array(self, name: str) -> np.ndarray:
        """One initializer's values, read from its span."""
        tensor = next(t for t in self.model.graph.initializer if t.name == name)
        return read_array(tensor, self.spans.get(name))

    @property
    def weight_bytes(self) -> int:
        return sum(span.length for span in self.spans.values())


def read_array(tensor, span: Span | None) -> np.ndarray:
    """The values of `tensor`: from its span, or from the tensor itself (small ones)."""
    from onnx import helper, numpy_helper
    if span is None:
        return numpy_helper.to_array(tensor)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    count = int(np.prod(tensor.dims, dtype=np.int64))
    if count * dtype.itemsize != span.length:
        raise ValueError(f"tensor {tensor.name}: {span.length} bytes stored for {count} "
                         f"values of {dtype}")
    return np.fromfile(span.path, dtype=dtype, count=count,
                       offset=span.offset).reshape(tuple(tensor.dims))


def _key(number: int, length: int) -> bytes:
    """The key and length prefix of a length-delimited field."""
    return encode_varint(number << 3 | 2) + encode_varint(length)


def _tensor_header(buf, start: int, end: int, path: Path, spans: dict) -> bytes:
    """A TensorProto's bytes without a raw_data of MIN_SPAN_BYTES or more, whose span
    is recorded under the tensor's name."""
    from google.protobuf.message import DecodeError
    from onnx import TensorProto
    kept, raw = bytearray(), None
    for number, wire, begin, after, field in _fields(buf, start, end):
        if number == _RAW_DATA and wire == 2 and after - begin >= MIN_SPAN_BYTES:
            raw = Span(path, begin, after - begin)
        else:
            kept += buf[field:after]
    if raw is not None:
        try:
            spans[TensorProto.FromString(bytes(kept)).name] = raw
        except DecodeError as exc:
            raise WireError(f"an initializer protobuf cannot parse ({exc})", start) from None
    return bytes(kept)


def _rewritten(buf, start: int, end: int, number: int, rewrite) -> bytes:
    """The message's bytes in [start, end) with each length-delimited field `number`
    replaced by rewrite(begin, after), the rest kept as they are, copied once the whole
    message walked: a first field claiming 3 GiB before garbage is never read."""
    parts = [_key(number, len(inner := rewrite(begin, after))) + inner
             if found == number and wire == 2 else (field, after)
             for found, wire, begin, after, field in _fields(buf, start, end)]
    return b"".join(p if isinstance(p, bytes) else buf[p[0]:p[1]] for p in parts)


def _graph_header(buf, start: int, end: int, path: Path, spans: dict) -> bytes:
    return _rewritten(buf, start, end, _INITIALIZER,
                      lambda begin, after: _tensor_header(buf, begin, after, path, spans))


def _model_header(buf, path: Path, spans: dict) -> bytes:
    """The ModelProto's bytes with its graph's large raw_data left out (walked, not
    parsed: linear in the file's size, stopping at the first byte protobuf refuses)."""
    return _rewritten(buf, 0, len(buf), _GRAPH,
                      lambda begin, after: _graph_header(buf, begin, after, path, spans))


def not_onnx(path, what: str) -> ModelError:
    """The one error for a file that is not ONNX (here and in onnx_compat.parse_header)."""
    return ModelError(f"{path} is not a valid ONNX model: {what}. Fix: export or copy it "
                      "again")


def unparsed(path, why: str) -> ModelError:
    return not_onnx(path, f"it does not parse ({why}); the file is truncated or is not ONNX")


def _walked(path: Path, spans: dict) -> bytes:
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size == 0:   # mmap refuses an empty file
                raise not_onnx(path, NO_GRAPH)
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _model_header(buf, path, spans)
    except WireError as exc:
        raise unparsed(path, str(exc)) from None


def _parsed(path: Path, model_bytes: bytes):
    import onnx
    from google.protobuf.message import DecodeError
    try:
        model = onnx.ModelProto.FromString(model_bytes)
    except DecodeError as exc:
        raise unparsed(path, f"protobuf: {' '.join(str(exc).split())[:200]}") from None
    if not model.HasField("graph"):
        raise not_onnx(path, NO_GRAPH)
    return model


def read_header(path) -> Header:
    """The model at `path` without its large initializers' data, and their spans (inline
    raw_data, or external data files named relative to the model's folder). A file that
    is not ONNX is a ModelError naming what is wrong and at which byte, found without
    reading more of the file than the walk reaches."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data
    path = Path(path).resolve()
    spans = {}
    model = _parsed(path, _walked(path, spans))
    for tensor in model.graph.initializer:
        if uses_external_data(tensor):
            info = ExternalDataInfo(tensor)
            data = path.parent / info.location
            length = info.length if info.length else (
                data.stat().st_size - (info.offset or 0) if data.is_file() else 0)
            spans[tensor.name] = Span(data, info.offset or 0, length)
            del tensor.external_data[:]
            # as onnx's load_external_data_for_model leaves it (explicitly DEFAULT), so
            # that the model writes out byte for byte as onnx would save it
            tensor.data_location = onnx.TensorProto.DEFAULT
    return Header(model, spans, path)


def header_model(path):
    """The model at `path` without its large weights' data (read_header's), or as
    onnx.load reads it without external data where read_header cannot make the spans
    (onnx then says what is wrong with it). A file that is not protobuf is a ModelError
    at once: onnx.load would read all of it first."""
    try:
        return read_header(path).model
    except ModelError:
        raise
    except Exception:  # noqa: BLE001 - a layout of external data the reader does not know
        import onnx
        return onnx.load(str(path), load_external_data=False)


def tensor_types(model) -> dict:
    """{tensor name: TypeProto.Tensor} of the graph's inputs, outputs and every tensor
    ONNX shape inference types (an element type of 0 or no shape: unknown to it).
    Raises what shape inference raises."""
    import onnx
    graph = onnx.shape_inference.infer_shapes(model).graph
    return {v.name: v.type.tensor_type for v in (*graph.value_info, *graph.input, *graph.output)}


def _split(message, number: int) -> tuple[bytes, bytes]:
    """`message` serialised without field `number`: the fields before it and after it
    (protobuf writes fields in number order, so the field goes between the two)."""
    before, after = type(message)(), type(message)()
    before.CopyFrom(message)
    after.CopyFrom(message)
    for field in message.DESCRIPTOR.fields:
        if field.number >= number:
            before.ClearField(field.name)
        if field.number <= number:
            after.ClearField(field.name)
    return before.SerializeToString(), after.SerializeToString()


def _copy(span: Span, out) -> None:
    with open(span.path, "rb") as fh:
        fh.seek(span.offset)
        left = span.length
        while left:
            chunk = fh.read(min(_CHUNK, left))
            if not chunk:
                raise ValueError(f"{span.path} ends before byte {span.offset + span.length}")
            out.write(chunk)
            left -= len(chunk)


def _inline_parts(model, spans: dict) -> tuple[list, int]:
    """The graph's initializers as pieces to write ((bytes | Span)...) and the graph's
    serialised length."""
    parts, total = [], 0
    for tensor in model.graph.initializer:
        span = spans.get(tensor.name)
        if span is None:
            body = [tensor.SerializeToString()]
        else:
            head, tail = _split(tensor, _RAW_DATA)
            body = [head, _key(_RAW_DATA, span.length), span, tail]
        size = sum(p.length if isinstance(p, Span) else len(p) for p in body)
        key = _key(_INITIALIZER, size)
        parts += [key, *body]
        total += len(key) + size
    return parts, total


def _write_inline(model, spans: dict, target: Path) -> None:
    """One file, byte for byte what onnx.save writes for the model with its data in."""
    graph_head, graph_tail = _split(model.graph, _INITIALIZER)
    parts, size = _inline_parts(model, spans)
    model_head, model_tail = _split(model, _GRAPH)
    graph_size = len(graph_head) + size + len(graph_tail)
    with open(target, "wb") as out:
        out.write(model_head + _key(_GRAPH, graph_size) + graph_head)
        for part in parts:
            _copy(part, out) if isinstance(part, Span) else out.write(part)
        out.write(graph_tail + model_tail)


def _write_external(model, spans: dict, target: Path) -> None:
    """`target` and `target`.data (every spanned tensor, page-aligned), as save_onnx
    lays out a model over 2 GiB."""
    import onnx
    data = target.with_name(target.name + ".data")
    header = onnx.ModelProto()
    header.CopyFrom(model)
    with open(data, "wb") as out:
        for tensor in header.graph.initializer:
            span = spans.get(tensor.name)
            if span is None:
                continue
            out.write(b"\0" * (-out.tell() % _ALIGN))
            offset = out.tell()
            _copy(span, out)
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", data.name), ("offset", str(offset)),
                               ("length", str(span.length))):
                tensor.external_data.add(key=key, value=value)
    onnx.save_model(header, str(target))


def write_model(model, spans: dict, target) -> None:
    """Save `model`, the initializers named in `spans` taking their bytes from there:
    one file under 2 GiB, else `target` and `target`.data. A failure leaves neither."""
    target = Path(target)
    data = target.with_name(target.name + ".data")
    data.unlink(missing_ok=True)
    inline = model.ByteSize() + sum(span.length + 16 for span in spans.values()) < INLINE_LIMIT
    try:
        (_write_inline if inline else _write_external)(model, spans, target)
    except BaseException:
        target.unlink(missing_ok=True)
        data.unlink(missing_ok=True)
        raise
