"""The model as the user gave it: a torch module or factory (+ checkpoint), an ONNX model
(a file from any exporter, or an onnx.ModelProto) or a TFLite file."""
from __future__ import annotations

import copy
import hashlib
import inspect
import shutil
import stat
from pathlib import Path

from compress.core.artifacts import Output, sha256_file
from compress.errors import ModelError
from compress.core.imports import import_callable
from compress.core.lazy import require
from compress.core.pyobjects import digest as object_digest


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_NOT_FILES = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR,
              "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def model_file(path: Path, what: str) -> Path:
    """`path` when it is a regular file (or a link to one); else a ModelError saying what
    it is. It is never opened here: reading a FIFO would wait for a writer for ever."""
    link = f" (a link to {path.readlink()})" if path.is_symlink() else ""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ModelError(f"{what}: file not found: {path}{link}") from None
    except OSError as exc:   # a loop of links, a name too long, a folder it cannot enter
        raise ModelError(f"{what}: cannot read {path}{link}: {exc.strerror}") from None
    if stat.S_ISREG(mode):
        return path
    kind = next((name for test, name in _NOT_FILES if test(mode)), "not a regular file")
    raise ModelError(f"{what}: {path}{link} is {kind}, not a regular file: give the model file")


def source_factory(pipeline):
    """A function that builds a fresh, untrained copy of the source's architecture."""
    spec = pipeline.model.torch
    if spec.module is not None:
        return lambda: copy.deepcopy(spec.module)
    factory = spec.factory
    if isinstance(factory, str):
        factory = import_callable(factory, pipeline.base_dir, ModelError, "model.torch.factory")
    return lambda: factory(**spec.kwargs)


def build_torch_model(pipeline):
    """The module as given, or the factory called and the checkpoint loaded
    (weights_only); in eval mode."""
    torch = require("torch", "a torch model source")
    spec = pipeline.model.torch
    if spec.module is not None:
        return spec.module.eval()
    label = spec.factory if isinstance(spec.factory, str) else "(a Python callable)"
    build = source_factory(pipeline)
    try:
        model = build()
    except (Exception, SystemExit) as exc:  # user code (sys.exit too)
        raise ModelError(f"model.torch.factory {label} raised "
                         f"{type(exc).__name__}: {_first_line(exc)}") from exc
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"model.torch.factory {label} returned "
                         f"{type(model).__name__}, not a torch.nn.Module")
    if spec.checkpoint:
        load_checkpoint(model, pipeline.resolve(spec.checkpoint), torch)
    return model.eval()


def load_checkpoint(model, path: Path, torch, what: str = "model.torch.checkpoint") -> None:
    model_file(path, what)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # corrupt file, pickle that is not plain weights
        raise ModelError(f"{what}: cannot load {path} with "
                         f"torch.load(weights_only=True): {_first_line(exc)}. Save it with "
                         "torch.save(model.state_dict(), path)") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as exc:
        detail = " ".join(str(exc).split())[:600]
        raise ModelError(f"{what} {path.name} does not match the factory's "
                         f"model: {detail}") from None


def check_torch_inputs(model, decls, feed: dict) -> None:
    """Run one feed so a wrong declared shape fails here, with a clear message."""
    from compress.model.run import torch_call
    torch = require("torch", "a torch model source")
    try:
        with torch.no_grad():
            torch_call(model, decls, feed, torch)
    except ModelError:
        raise
    except Exception as exc:
        shapes = {name: list(array.shape) for name, array in feed.items()}
        raise ModelError(f"the model fails on one call with inputs shaped {shapes} (as "
                         f"model.inputs declares or the data gives): {type(exc).__name__}: "
                         f"{_first_line(exc)}") from None


def onnx_graph(pipeline):
    """The source ONNX model's graph, checked (a file from any exporter, with its
    external data, or a ModelProto given from Python)."""
    onnx = require("onnx", "an ONNX model source")
    source = pipeline.model.onnx
    if not isinstance(source, str):
        model = source
    else:
        path = pipeline.resolve(source)
        model_file(path, "model.onnx")
        # the graph without its weights' data (a 1 GB model took 2.1 GB here loaded whole)
        from compress.model.onnx_compat import read_graph
        try:
            header = read_graph(path)
        except ModelError as exc:
            raise ModelError(f"model.onnx: {exc}") from None
        model = header.model
    checked = (_weights_as_inputs(header) if isinstance(source, str)
               else model if model.ByteSize() < 2**31 - 1 else str(pipeline.resolve(source)))
    try:
        onnx.checker.check_model(checked)
    except Exception as exc:
        from compress.model.onnx_compat import opset_of
        raise ModelError(f"model.onnx (opset {opset_of(model)}): the ONNX checker refuses it: "
                         f"{_first_line(exc)}. Re-export it with an op set the model's opset "
                         "has, or a newer opset") from None
    return model.graph


def _weights_as_inputs(header):
    """The header's model with the weights whose data it left out as graph inputs (same
    type and shape): what the checker checks of a graph, without the weights' bytes."""
    import onnx
    model = onnx.ModelProto()
    model.CopyFrom(header.model)
    graph, inputs = model.graph, {i.name for i in model.graph.input}
    stubs = [t for t in graph.initializer if t.name in header.spans]
    kept = [t for t in graph.initializer if t.name not in header.spans]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                       for t in stubs if t.name not in inputs)
    return model


def check_tflite_file(path: Path) -> dict:
    """The file loads in LiteRT as apps open it: the default op resolver and its
    delegates, so a custom op that LiteRT provides through XNNPACK (MediaPipe's
    Convolution2DTransposeBias) loads too. Returns its tensor report (dtypes, float32
    tensors, I/O quantization)."""
    from export.quiet import native_output_hidden
    from runtimes.errors import RuntimeInputError
    from runtimes.loader import load
    model_file(path, "model.tflite")
    try:
        with native_output_hidden(), load(str(path), engine="litert"):  # the delegate's log
            pass
    except RuntimeInputError as exc:
        raise ModelError(f"model.tflite: {exc}") from None
    from export.tflite import tensor_report
    return tensor_report(path)


def tflite_precision(report: dict) -> str:
    """What a .tflite file holds, read from its tensor types."""
    dtypes = report["dtypes"]
    if dtypes.get("int8") and not report["float32_tensors"]:
        return "int8"
    if dtypes.get("float16"):
        return "fp16"
    return "int8-dynamic" if dtypes.get("int8") else "fp32"


_INTEGER_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "ConvInteger",
                "MatMulInteger", "QLinearConv", "QLinearMatMul", "MatMulNBits"}


def onnx_precision(proto) -> str:
    """What an ONNX model holds: int8 where it has integer/QDQ ops, fp16 where its
    weights are half precision, else fp32."""
    ops = {node.op_type for node in proto.graph.node}
    if ops & _INTEGER_OPS:
        return "int8"
    if any(init.data_type == 10 for init in proto.graph.initializer):  # FLOAT16
        return "fp16"
    return "fp32"


def factory_digest(spec, base_dir: Path, what: str | None = None) -> str:
    """Digest of the code of the module that defines a `module:callable` factory (or of a
    callable given from Python); `what` names the setting in errors."""
    if not isinstance(spec, str):
        return object_digest(spec)
    factory = import_callable(spec, base_dir, ModelError, what or spec)
    try:
        source = inspect.getsource(inspect.getmodule(factory))
    except (OSError, TypeError):
        source = spec  # a builtin or compiled factory: its checkpoint identifies it
    return hashlib.sha256(source.encode()).hexdigest()


def external_digest(items: dict[str, object], pipeline) -> str:
    """Digest of the files and factory modules a stage names (see external_inputs)."""
    h = hashlib.sha256()
    for setting, item in items.items():
        if not isinstance(item, str):  # a factory given from Python
            h.update(factory_digest(item, pipeline.base_dir).encode())
            continue
        path = pipeline.resolve(item)
        if path.is_file():
            h.update(sha256_file(path).encode())
        elif ":" in item:
            h.update(factory_digest(item, pipeline.base_dir, setting).encode())
        else:
            h.update(f"missing:{item}".encode())
    return h.hexdigest()


def source_digest(pipeline) -> str:
    """What identifies the source model: its content (file digests, the serialised graph,
    the module's weights) plus the factory's own code."""
    model = pipeline.model
    h = hashlib.sha256(str([d.model_dump() for d in model.inputs or ()]).encode())
    if model.causal_lm is not None and not isinstance(model.causal_lm, str):
        from compress.model.causal_lm import object_sha256
        return object_sha256(model.causal_lm)
    if model.causal_lm is not None:
        from compress.model.causal_lm import source_files
        path = pipeline.resolve(model.causal_lm)
        for part in source_files(path):
            h.update(part.name.encode() + sha256_file(part).encode())
        return h.hexdigest()
    if model.onnx is not None or model.tflite is not None:
        source = model.onnx if model.onnx is not None else model.tflite
        if not isinstance(source, str):
            h.update(object_digest(source).encode())
            return h.hexdigest()
        path = pipeline.resolve(source)
        for part in [path, *(_external_files(path) if model.onnx is not None else [])]:
            h.update(sha256_file(part).encode())  # weights in a data file count too
        return h.hexdigest()
    spec = model.torch
    if spec.module is not None:
        h.update(object_digest(spec.module).encode())
        return h.hexdigest()
    h.update(spec.model_dump_json(exclude={"factory", "module"}).encode())
    if spec.checkpoint:
        h.update(sha256_file(pipeline.resolve(spec.checkpoint)).encode())
    h.update(factory_digest(spec.factory, pipeline.base_dir).encode())
    return h.hexdigest()


def _external_files(path: Path) -> list[Path]:
    """The external data files an ONNX model names, in a stable order."""
    from compress.model.onnx_compat import read_graph
    header = read_graph(path)
    return sorted({span.path for span in header.spans.values() if span.path != header.path})


def write_source(pipeline, model, out_dir: Path) -> Output:
    """Keep a copy of the source model in the run directory (self-contained runs); an
    ONNX model is written as one file, its external data inlined."""
    spec = pipeline.model
    if spec.causal_lm is not None:
        from compress.model.causal_lm import write_lm_object, write_lm_source
        target = out_dir / "model"
        meta = (write_lm_source(pipeline.resolve(spec.causal_lm), target)
                if isinstance(spec.causal_lm, str) else write_lm_object(spec.causal_lm, target))
        return Output(target, "causal_lm", "fp32", meta)
    if spec.onnx is not None:
        from compress.model.onnx_compat import copy_onnx, opset_of, save_onnx
        target = out_dir / "model.onnx"
        if isinstance(spec.onnx, str):
            proto = copy_onnx(pipeline.resolve(spec.onnx), target)
        else:
            proto = spec.onnx
            save_onnx(proto, target)
        return Output(target, "onnx", onnx_precision(proto), {
            "opset": opset_of(proto), "producer": proto.producer_name or None})
    if spec.tflite:
        target = out_dir / "model.tflite"
        shutil.copyfile(pipeline.resolve(spec.tflite), target)
        from export.tflite import tensor_report
        report = tensor_report(target)
        return Output(target, "tflite", tflite_precision(report), {"tensors": report})
    from compress.model.torch_artifacts import save_torch_model
    target = out_dir / "model.pt"
    save_torch_model(model, target)
    factory = spec.torch.factory if isinstance(spec.torch.factory, str) else None
    return Output(target, "torch", "fp32", {"factory": factory, "kwargs": spec.torch.kwargs})
