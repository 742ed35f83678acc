"""The model as the user gave it: a torch factory (+ checkpoint) or an ONNX file."""
from __future__ import annotations

import hashlib
import inspect
import shutil
from pathlib import Path

import numpy as np

from compress.artifacts import Output, sha256_file
from compress.config import Pipeline
from compress.errors import ModelError
from compress.imports import import_callable
from compress.lazy import require


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def build_torch_model(pipeline: Pipeline):
    """Call the factory, load the checkpoint (weights_only), switch to eval mode."""
    torch = require("torch", "a torch model source")
    spec = pipeline.model.torch
    factory = import_callable(spec.factory, pipeline.base_dir, ModelError, "model.torch.factory")
    try:
        model = factory(**spec.kwargs)
    except Exception as exc:  # user code
        raise ModelError(f"model.torch.factory '{spec.factory}' raised "
                         f"{type(exc).__name__}: {_first_line(exc)}") from exc
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"model.torch.factory '{spec.factory}' returned "
                         f"{type(model).__name__}, not a torch.nn.Module")
    if spec.checkpoint:
        load_checkpoint(model, pipeline.resolve(spec.checkpoint), torch)
    return model.eval()


def load_checkpoint(model, path: Path, torch, what: str = "model.torch.checkpoint") -> None:
    if not path.is_file():
        raise ModelError(f"{what}: file not found: {path}")
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


def check_torch_inputs(model, pipeline: Pipeline, sample: dict | None) -> None:
    """Run one forward pass so a wrong declared shape fails here, with a clear message.
    Without data, zeros of the declared shape stand in."""
    torch = require("torch", "a torch model source")
    if sample is None:
        sample = {d.name: np.zeros(d.shape, dtype=d.dtype) for d in pipeline.model.inputs}
    args = [torch.from_numpy(sample[d.name][:1]) for d in pipeline.model.inputs]
    try:
        with torch.no_grad():
            model(*args)
    except Exception as exc:
        shapes = {d.name: [1, *d.shape[1:]] for d in pipeline.model.inputs}
        raise ModelError(f"the model fails on inputs shaped as declared in model.inputs "
                         f"{shapes}: {type(exc).__name__}: {_first_line(exc)}") from None


def check_onnx_file(path: Path, pipeline: Pipeline) -> None:
    onnx = require("onnx", "an ONNX model source")
    if not path.is_file():
        raise ModelError(f"model.onnx: file not found: {path}")
    try:
        onnx.checker.check_model(str(path))
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:
        raise ModelError(f"model.onnx: {path} is not a valid ONNX model: {_first_line(exc)}. "
                         "Re-export it, or check that the download/copy was complete") from None
    initializers = {i.name for i in graph.initializer}
    actual = [i.name for i in graph.input if i.name not in initializers]
    declared = [d.name for d in pipeline.model.inputs]
    if actual != declared:
        raise ModelError(f"model.inputs declares {declared} but {path.name} has inputs {actual}")


def check_tflite_file(path: Path, pipeline: Pipeline) -> dict:
    """The file loads in LiteRT and takes the inputs model.inputs declares. Returns its
    tensor report (dtypes, float32 tensors, I/O quantization)."""
    from runtimes.errors import RuntimeInputError
    from runtimes.loader import load
    if not path.is_file():
        raise ModelError(f"model.tflite: file not found: {path}")
    try:
        with load(str(path), engine="litert", xnnpack=False) as session:  # no delegate log
            actual = [list(spec.shape) for spec in session.inputs]
    except RuntimeInputError as exc:
        raise ModelError(f"model.tflite: {exc}") from None
    declared = [list(d.shape) for d in pipeline.model.inputs]
    if actual != declared:
        raise ModelError(f"model.inputs declares shapes {declared} but {path.name} takes "
                         f"{actual}; declare the shapes the model takes (NHWC models take "
                         "[batch, height, width, channels]) and give data in that layout")
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


def factory_digest(spec: str, base_dir: Path) -> str:
    """Digest of the code of the module that defines a `module:callable` factory."""
    factory = import_callable(spec, base_dir, ModelError, spec)
    try:
        source = inspect.getsource(inspect.getmodule(factory))
    except (OSError, TypeError):
        source = spec  # a builtin or compiled factory: its checkpoint identifies it
    return hashlib.sha256(source.encode()).hexdigest()


def external_digest(items: tuple[str, ...], pipeline: Pipeline) -> str:
    """Digest of the files and factory modules a stage names (see external_inputs)."""
    h = hashlib.sha256()
    for item in items:
        path = pipeline.resolve(item)
        if path.is_file():
            h.update(sha256_file(path).encode())
        elif ":" in item:
            h.update(factory_digest(item, pipeline.base_dir).encode())
        else:
            h.update(f"missing:{item}".encode())
    return h.hexdigest()


def source_digest(pipeline: Pipeline) -> str:
    """What identifies the source model: file digests plus the factory's own code."""
    if pipeline.model.onnx or pipeline.model.tflite:
        return sha256_file(pipeline.resolve(pipeline.model.onnx or pipeline.model.tflite))
    spec = pipeline.model.torch
    h = hashlib.sha256(spec.model_dump_json().encode())
    if spec.checkpoint:
        h.update(sha256_file(pipeline.resolve(spec.checkpoint)).encode())
    h.update(factory_digest(spec.factory, pipeline.base_dir).encode())
    return h.hexdigest()


def write_source(pipeline: Pipeline, model, out_dir: Path) -> Output:
    """Keep a copy of the source model in the run directory (self-contained runs)."""
    if pipeline.model.onnx:
        target = out_dir / "model.onnx"
        shutil.copyfile(pipeline.resolve(pipeline.model.onnx), target)
        return Output(target, "onnx", "fp32")
    if pipeline.model.tflite:
        target = out_dir / "model.tflite"
        shutil.copyfile(pipeline.resolve(pipeline.model.tflite), target)
        from export.tflite import tensor_report
        report = tensor_report(target)
        return Output(target, "tflite", tflite_precision(report), {"tensors": report})
    from compress.torch_artifacts import save_torch_model
    target = out_dir / "model.pt"
    save_torch_model(model, target)
    spec = pipeline.model.torch
    return Output(target, "torch", "fp32", {"factory": spec.factory, "kwargs": spec.kwargs})


def run_model(model_or_path, pipeline: Pipeline, inputs: dict, batch: int = 64) -> np.ndarray:
    """First output of the source model on `inputs` (torch module, ONNX or TFLite path)."""
    names = [d.name for d in pipeline.model.inputs]
    total = len(inputs[names[0]])
    if isinstance(model_or_path, (str, Path)):
        from runtimes.loader import load
        from runtimes.feeds import iter_batches, select_inputs
        with load(str(model_or_path)) as session:
            fixed = session.inputs[0].shape[0]
            step = fixed if isinstance(fixed, int) else batch
            feeds = select_inputs({n: inputs[n] for n in names}, session.inputs)
            outs = [session.run(chunk)[0][:real] for chunk, real in iter_batches(feeds, step)]
        return np.concatenate(outs)
    torch = require("torch", "a torch model source")
    outs = []
    with torch.no_grad():
        for start in range(0, total, batch):
            args = [torch.from_numpy(inputs[n][start:start + batch]) for n in names]
            out = model_or_path(*args)
            out = out[0] if isinstance(out, (tuple, list)) else out
            outs.append(out.detach().cpu().numpy())
    return np.concatenate(outs)
