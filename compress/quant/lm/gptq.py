"""GPTQ for a causal language model: neural-compressor's (3.x) GPTQ on the float torch
model, calibrated on the text's calibration ids, in onnxruntime-genai's INT4 file with
neural-compressor's own integers.

1. GPTQ quantizes every Linear of the transformer layers in blocks of `block_size` inputs
   (symmetric or not), each layer's rounding errors pushed onto its inputs not yet
   rounded, from the layer's inputs on the calibration ids. neural-compressor leaves the
   output layer alone; the builder quantizes it (and the embeddings tied to it) as in
   its own INT4 file.
2. The dequantized weights are written as a Hugging Face folder; the model builder makes
   its FP32 and INT4 files of it.
3. Each MatMulNBits of the INT4 file whose FP32 weight is made of GPTQ modules' weights
   (q, k and v side by side in one node) takes those modules' integers, scales and zero
   points: the file computes what GPTQ's model computes. The builder's re-rounding of
   weights already on GPTQ's grid would move some of them (a block's largest weight sets
   its scale; GPTQ's scale comes from the weights before the updates).
"""
from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

from compress.errors import ModelError

FEW_TOKENS = 1024   # fewer calibration ids than a wide layer's inputs: a noisy Hessian


def gptq_model(hf_folder: Path, ids: list[int], window: int, config, progress):
    """The float model with GPTQ's INCWeightOnlyLinear modules: (model, {name: module})."""
    import logging

    import torch
    from transformers import AutoModelForCausalLM

    from export.quiet import native_output_hidden
    with native_output_hidden():   # its CUDA kernels' load failures, on a CPU machine
        from neural_compressor.torch.quantization import GPTQConfig, convert, prepare
    # it sets its logger to INFO on import (a line per layer); the stage restores it after
    logging.getLogger("neural_compressor").setLevel(logging.ERROR)
    model = AutoModelForCausalLM.from_pretrained(str(hf_folder), dtype=torch.float32).eval()
    batches = [torch.tensor([ids[i:i + window]]) for i in range(0, len(ids) - 1, window)]
    # GPTQ resolves `model_path` even when it does not load weights layer by layer, and an
    # empty path makes it try the Hugging Face Hub: any local directory will do
    gptq = GPTQConfig(bits=4, group_size=config.block_size, use_sym=config.symmetric,
                      use_layer_wise=False, model_path=tempfile.gettempdir())
    with torch.no_grad(), warnings.catch_warnings(), progress.task(
            f"neural-compressor GPTQ on {len(ids)} calibration tokens", None):
        warnings.simplefilter("ignore")
        try:
            prepared = prepare(model, gptq)
            for batch in batches:
                prepared(batch)
            model = convert(prepared)
        except Exception as exc:  # noqa: BLE001 - say which model and why, not a traceback
            raise ModelError(f"neural-compressor's GPTQ failed on this model: "
                             f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}; "
                             "use method default, rtn or k_quant") from None
    modules = {name: module for name, module in model.named_modules()
               if type(module).__name__ == "INCWeightOnlyLinear"}
    if not modules:
        raise ModelError("neural-compressor's GPTQ quantized no layer of this model")
    return model, modules


def save_dequantized(model, modules: dict, hf_folder: Path, out: Path) -> Path:
    """The model with each GPTQ module back as a float Linear of its dequantized weights,
    as a Hugging Face folder (the source's tokenizer files beside it)."""
    import torch
    for name, module in modules.items():
        parent, _, child = name.rpartition(".")
        linear = torch.nn.Linear(module.in_features, module.out_features,
                                 bias=module.bias is not None)
        linear.weight.data = module.recover().float().contiguous()
        if module.bias is not None:
            linear.bias.data = module.bias.float()
        setattr(model.get_submodule(parent) if parent else model, child, linear)
    model.save_pretrained(str(out))
    for item in hf_folder.iterdir():   # tokenizer, chat template: what the builder copies
        if item.is_file() and not (out / item.name).exists() and item.suffix != ".safetensors":
            shutil.copy2(item, out / item.name)
    return out


def transplant(fp32: Path, int4: Path, modules: dict) -> int:
    """The INT4 folder's MatMulNBits made of GPTQ's integers (module 3. of this file's
    docstring), in place; the number of nodes replaced."""
    import onnx
    from onnx import numpy_helper

    from compress.quant.nbits_pack import from_inc, stacked
    first_columns = {np.ascontiguousarray(m.recover().float().numpy()[0]).tobytes(): name
                     for name, m in modules.items()}
    float_model = onnx.load(str(fp32 / "model.onnx"))
    weights = {i.name: i for i in float_model.graph.initializer}
    made_of = {}   # a MatMul's output -> the modules side by side in its weight
    for node in float_model.graph.node:
        if node.op_type == "MatMul" and node.input[1] in weights:
            names = _modules_in(numpy_helper.to_array(weights[node.input[1]]), first_columns,
                                modules)
            if names:
                made_of[node.output[0]] = names
    del float_model, weights
    model = onnx.load(str(int4 / "model.onnx"))
    replaced = 0
    for node in model.graph.node:
        names = made_of.get(node.output[0]) if node.op_type == "MatMulNBits" else None
        if names:
            parts = stacked([from_inc(modules[n].unpack(), modules[n].group_size)
                             for n in names])
            _set_tensors(model.graph, node, parts)
            replaced += 1
    if replaced:
        _write(model, int4)
    return replaced


def _modules_in(weight: np.ndarray, first_columns: dict, modules: dict) -> list[str]:
    """The modules whose float weights are `weight`'s columns ([K, N]) left to right,
    exactly; [] when the weight is not made of them."""
    names, column = [], 0
    while column < weight.shape[1]:
        name = first_columns.get(np.ascontiguousarray(weight[:, column]).tobytes())
        if name is None:
            return []
        part = modules[name].recover().float().numpy().T
        if not np.array_equal(weight[:, column:column + part.shape[1]], part):
            return []
        names.append(name)
        column += part.shape[1]
    return names


def _set_tensors(graph, node, parts) -> None:
    """The node's weights, scales and zero points replaced by `parts`'."""
    from onnx import helper, numpy_helper
    stem = node.name.replace("/", "_").strip("_")
    inputs = [node.input[0], f"{stem}.gptq_q4", f"{stem}.gptq_scales"]
    tensors = [parts.packed, parts.scales]
    if parts.zero_points is not None:
        inputs.append(f"{stem}.gptq_zero_points")
        tensors.append(parts.zero_points)
    graph.initializer.extend(numpy_helper.from_array(t, n) for t, n in zip(tensors, inputs[1:]))
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attributes.update(K=parts.k, N=parts.n, bits=4, block_size=parts.block)
    del node.input[:]
    node.input.extend(inputs)
    del node.attribute[:]
    node.attribute.extend(helper.make_attribute(k, v) for k, v in sorted(attributes.items()))


def _write(model, folder: Path) -> None:
    """model.onnx and its weights again, without the tensors no node reads any more."""
    import onnx
    used = {name for node in model.graph.node for name in node.input}
    keep = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    for old in folder.glob("model.onnx*"):
        old.unlink()
    onnx.save(model, str(folder / "model.onnx"), save_as_external_data=True,
              location="model.onnx.data", size_threshold=1024)
