"""Quantizing a model too large to hold several times: tensor by tensor.

onnxruntime's quantizers load the whole model, run shape inference through temporary
copies, keep float and quantized weights side by side and serialise the result in
memory: on a 1 GB MatMul/Gemm model the stage peaked at 3.2x (int4) to 6.0x (int8-dynamic)
the model, quant_pre_process alone at 5.3x (docs/memory.md). Here the graph is read without
its weights (compress.model.onnx_file), each weight is read from the file when its node
is quantized, quantized with onnxruntime's own numerics and written to a scratch file at
once, and the output is assembled file to file: the weights are never all in memory.

It covers the layers that hold a large model's weights, MatMul and Gemm with constant
weights (and Gather embeddings for int4); the rest of the graph stays in float. Below
STREAMING_BYTES of weights, or for settings it does not cover, the stage keeps using
onnxruntime's quantizers unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from compress.model.onnx_file import MIN_SPAN_BYTES, Header, Span, read_header, write_model

# Weights (bytes) from which a model is quantized tensor by tensor. Below it onnxruntime's
# in-memory quantizers (3-6x the model at their peak: under 3 GiB here) fit a machine
# comfortably, and they cover every op (this path: MatMul/Gemm/embeddings only).
STREAMING_BYTES = 512 << 20


def _unsupported(config, can_stream: bool = True) -> str | None:
    """Why the tensor-by-tensor path cannot make what `config` asks for, if it cannot: a
    scheme with no streamed back end (`can_stream` false), or a setting the scheme's own
    back end refuses (`streaming_refusal`: an INT8 pass asked for on purpose that cannot
    stream; a pass on by default is left out there, not refused)."""
    if config.static_shapes:
        return "static_shapes"
    if not can_stream:
        return f"scheme {config.scheme}"
    return config.streaming_refusal()


def streamed_header(source: Path, config, note, can_stream: bool = True) -> Header | None:
    """The model's header when it is large enough to be quantized tensor by tensor and
    the settings allow it (`can_stream`: the scheme has a streamed back end); None for
    onnxruntime's in-memory quantizers."""
    try:
        header = read_header(source)
    except Exception:  # noqa: BLE001 - a file this reader cannot walk: the usual path says why
        return None
    if header.weight_bytes < STREAMING_BYTES:
        return None
    size = f"{header.weight_bytes / 2**30:.2f} GiB of weights"
    reason = _unsupported(config, can_stream)
    if reason:
        note(f"{size}: {reason} needs onnxruntime's in-memory quantizer, which holds the "
             "model in memory 3 to 6 times over (docs/memory.md)")
        return None
    note(f"{size}: quantizing one tensor at a time to save memory (MatMul/Gemm weights; "
         "other ops stay float)")
    return header


class TensorSink:
    """A scratch file new tensors are appended to, each becoming a span: quantized
    weights leave memory as soon as they are made."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.spans: dict[str, Span] = {}
        self._out = open(self.path, "wb")

    def add(self, tensor):
        """A copy of `tensor` (a TensorProto) whose raw_data went to the file (small
        tensors and typed fields such as float_data stay in it). A copy: a message that
        is part of another (a graph's initializer) keeps that whole message alive."""
        from onnx import TensorProto
        if len(tensor.raw_data) >= MIN_SPAN_BYTES:
            offset = self._out.tell()
            self._out.write(tensor.raw_data)
            tensor.ClearField("raw_data")
            self.spans[tensor.name] = Span(self.path, offset, self._out.tell() - offset)
        stub = TensorProto()
        stub.CopyFrom(tensor)
        return stub

    def close(self) -> None:
        self._out.close()

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


@dataclass
class Build:
    """The quantized graph as it is made: its nodes, the new initializers (their bytes
    already in the scratch file) and the source's header the weights come from."""
    header: Header
    sink: TensorSink
    model: object                       # the header's model, prepared (opset, shapes)
    nodes: list = field(default_factory=list)
    added: dict = field(default_factory=dict)
    names: set = field(default_factory=set)

    def __post_init__(self):
        graph = self.model.graph
        self.initializers = {t.name: t for t in graph.initializer}
        self.names = {n for node in graph.node for n in (*node.input, *node.output)}
        self.names |= set(self.initializers) | {v.name for v in (*graph.input, *graph.output)}
        self.types = {v.name: v.type.tensor_type.elem_type
                      for v in (*graph.input, *graph.output, *graph.value_info)}

    def array(self, name: str) -> np.ndarray:
        from compress.model.onnx_file import read_array
        return read_array(self.initializers[name], self.header.spans.get(name))

    def is_float_weight(self, name: str) -> bool:
        from onnx import TensorProto
        tensor = self.initializers.get(name)
        return tensor is not None and tensor.data_type == TensorProto.FLOAT

    def add(self, tensor) -> str:
        """Add an initializer (its bytes go to the scratch file); a name added before
        keeps its first tensor (weights shared by several nodes are quantized once)."""
        if tensor.name not in self.added:
            self.added[tensor.name] = self.sink.add(tensor)
            self.names.add(tensor.name)
        return tensor.name

    def unique(self, name: str) -> str:
        """`name`, or `name_1`, `name_2`, ... where the graph uses it already."""
        candidate, index = name, 0
        while candidate in self.names:
            index += 1
            candidate = f"{name}_{index}"
        self.names.add(candidate)
        return candidate


def _prepared(header: Header, config):
    """A copy of the header's model at the opset the scheme's graph needs, with onnx's
    shape inference (types of activations) run on the graph alone."""
    import onnx
    from compress.model.onnx_compat import needed_opset, upgrade_opset
    model = onnx.ModelProto()
    model.CopyFrom(header.model)
    record = None
    if config.scheme.startswith("int8"):
        from onnxruntime.quantization import QuantType
        from onnxruntime.quantization.quant_utils import update_opset_version
        model, record = upgrade_opset(model, needed_opset(config.per_channel,
                                                          config.activations, config.weights))
        # what quantize_dynamic and quantize_static do first (opset 11 or more for int8)
        model = update_opset_version(model, QuantType.QInt8)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - types then come from initializers and inputs only
        pass
    return model, record


def _used_names(graph) -> set:
    """Every tensor name the graph's nodes (subgraphs included) read, and its outputs."""
    from compress.model.onnx_compat import _nodes
    return {n for node in _nodes(graph) for n in node.input} | {o.name for o in graph.output}


def finish(build: Build, target: Path) -> None:
    """Write the quantized model: the new nodes, the source's initializers still in use
    (copied from the source file) and the new ones (from the scratch file)."""
    import onnx
    model = onnx.ModelProto()
    model.CopyFrom(build.model)
    graph = model.graph
    del graph.node[:]
    graph.node.extend(build.nodes)
    used = _used_names(graph)
    # a node's output now (a bias behind its DequantizeLinear) is no initializer any more
    produced = {o for node in graph.node for o in node.output}
    kept = [t for t in build.model.graph.initializer if t.name in used - produced]
    added = [t for name, t in build.added.items() if name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept + added)
    known = [v for v in graph.value_info if v.name in produced | used]
    del graph.value_info[:]
    graph.value_info.extend(known)
    spans = {t.name: build.header.spans[t.name] for t in kept if t.name in build.header.spans}
    spans.update({t.name: build.sink.spans[t.name] for t in added if t.name in build.sink.spans})
    build.sink.close()
    write_model(model, spans, target)


def quantize_streamed(header: Header, target: Path, config, exclude: tuple,
                      back_end) -> dict:
    """The scheme's quantized model at `target`, made tensor by tensor by the scheme's own
    `back_end(build, excluded) -> meta` (its module registers it: compress/quant/schemes/);
    the meta."""
    model, record = _prepared(header, config)
    sink = TensorSink(target.with_name(target.name + ".weights.tmp"))
    build = Build(header, sink, model)
    excluded = set(config.exclude_nodes) | set(exclude)
    try:
        meta = back_end(build, excluded)
        finish(build, target)
    finally:
        sink.remove()
    streamed = {"weight_bytes": header.weight_bytes, "threshold_bytes": STREAMING_BYTES}
    return {**meta, "tensor_by_tensor": streamed,
            **({"opset_upgraded": record} if record else {})}
