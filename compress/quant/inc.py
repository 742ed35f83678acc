"""Intel Neural Compressor (3.x) as the quantization back end for torch models; the result
is exported to ONNX so it is measured like every other artifact.

- int8-static: INC's PT2E flow (export, prepare with its default static config,
  calibrate, convert), then torch.onnx.export of the QDQ graph.
- int4-weight-only: INC's weight-only quantization (RTN, or GPTQ and AWQ calibrated on
  data.calibration). INC keeps packed int4 weights inside its own Linear modules, but
  torch.onnx.export writes them back out as float MatMuls (as big as FP32), and letting
  onnxruntime re-round those weights loses what GPTQ gained (the two grids differ). So
  each exported MatMul is matched to its INC module and replaced by a MatMulNBits node
  built from INC's own integers, scales and zero points: the ONNX model computes what
  the INC model computes.
"""
from __future__ import annotations

import copy
import tempfile
import warnings
from pathlib import Path

import numpy as np

from compress.errors import ModelError
from compress.core.lazy import require
from compress.core.scratch import in_scratch_dir
from compress.quant.torch_to_onnx import (dynamic_batch_example, export_quantized,
                                          fold_weight_quantization)


def _calibration_batches(ctx, names: list[str], samples: int, torch) -> list[tuple]:
    data = ctx.require_dataset("calibration", "neural-compressor calibration")
    return [tuple(torch.from_numpy(feed[n]) for n in names) for feed in data.take(samples)]


def int8_static(ctx, artifact, config, target: Path) -> dict:
    """The stage imported neural_compressor (quietly) before calling this."""
    torch = require("torch", "quantize with backend neural-compressor")
    from neural_compressor.torch.export import export

    names = [d.name for d in ctx.inputs]
    batches = _calibration_batches(ctx, names, config.samples, torch)
    model = copy.deepcopy(ctx.torch_model(artifact)).eval()
    # a dynamic batch, so the metric can run on batches of evaluation data in autotuning
    example, dynamic = dynamic_batch_example(
        ctx.require_dataset("calibration", "neural-compressor calibration")
        .samples("neural-compressor").inputs, names)
    meta = {"backend": "neural-compressor", "calibration_samples": len(batches)}
    with in_scratch_dir(), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.export's pytree deprecations
        graph = export(model, example, dynamic_shapes=dynamic)
        if config.max_drop is None:
            quantized = _calibrate_default(graph, example, batches, ctx)
            meta["config"] = ("INC default static: int8 symmetric per-channel weights, uint8 "
                              "asymmetric per-tensor activations")
        else:
            quantized, meta["autotune"] = _autotune(graph, example, batches, config, ctx)
    with tempfile.TemporaryDirectory() as scratch:
        exported = Path(scratch) / "qdq.onnx"
        export_quantized(quantized, batches[0], exported, ctx)
        fold_weight_quantization(exported, target)
    return meta


def _calibrate_default(graph, example, batches, ctx):
    from neural_compressor.torch.quantization import convert, get_default_static_config, prepare
    with ctx.progress.task(f"neural-compressor: calibrating ({len(batches)} samples)",
                           len(batches)) as advance:
        prepared = prepare(graph, get_default_static_config(), example_inputs=example)
        for batch in batches:
            prepared(*batch)
            advance(1)
        return convert(prepared)


def _autotune(graph, example, batches, config, ctx):
    """INC's own accuracy-driven tuning: it tries its static configurations (symmetric or
    not, MinMax or KL activations) until one is within `tolerable_loss` of the float
    model. It returns its best model even when none is, so the drop is checked here."""
    from neural_compressor.torch.quantization import StaticQuantConfig, TuningConfig, autotune

    from compress.model.torch_eval import torch_metric
    baseline = ctx.metric_baseline()
    scores = []

    def evaluate(model) -> float:
        scores.append(torch_metric(model, ctx)["value"])
        return scores[-1]

    def calibrate(model) -> None:
        for batch in batches:
            model(*batch)

    tuning = TuningConfig(config_set=[StaticQuantConfig.get_config_set_for_tuning()],
                          tolerable_loss=config.max_drop / max(baseline, 1e-12))
    with ctx.progress.task(f"neural-compressor: trying its int8 settings until the accuracy "
                           f"drop fits max_drop {config.max_drop}", None):
        quantized = autotune(graph, tuning, eval_fn=evaluate, run_fn=calibrate,
                             example_inputs=example)
    final = torch_metric(quantized, ctx)["value"]
    report = {"max_drop": config.max_drop, "baseline": baseline, "final_metric": final,
              "final_drop": baseline - final, "budget_met": baseline - final <= config.max_drop,
              "trials": max(len(scores) - 1, 0), "trial_metrics": scores[1:]}
    if not report["budget_met"]:
        ctx.progress.note(f"max_drop {config.max_drop} not reached by neural-compressor's "
                          f"tuning: keeping its best model (accuracy drop {baseline - final:.4f})")
    return quantized, report


def _woq_config(config):
    import torch
    from neural_compressor.torch.quantization import AWQConfig, GPTQConfig, RTNConfig
    # Linear layers only: the ONNX side packs MatMuls, and INC's GPTQ fails on Conv2d.
    common = {"bits": 4, "group_size": config.block_size, "use_sym": config.symmetric,
              "white_list": [torch.nn.Linear]}
    if config.algorithm == "rtn":
        return RTNConfig(**common, use_layer_wise=False)
    if config.algorithm == "gptq":
        # GPTQ resolves `model_path` even when it does not load weights layer by layer, and
        # an empty path makes it try the Hugging Face Hub: give it any local directory.
        return GPTQConfig(**common, use_layer_wise=False, model_path=tempfile.gettempdir())
    return AWQConfig(**common)


class _KeywordInputs(dict):
    """AWQ moves its example to the device with `.to()` and calls the model with it:
    a dict of the model's inputs by name, with the `.to` a tokenizer's output has."""

    def to(self, device):
        return _KeywordInputs({name: value.to(device) for name, value in self.items()})


def _awq_example(example: tuple, names: list[str]):
    """One tensor for one-input models; otherwise the inputs by name, which only works
    when model.inputs are named like the forward() parameters."""
    return example[0] if len(example) == 1 else _KeywordInputs(zip(names, example))


def int4_weight_only(ctx, artifact, config, target: Path) -> dict:
    """The stage imported neural_compressor (quietly) before calling this."""
    torch = require("torch", "quantize with backend neural-compressor")
    from neural_compressor.torch.quantization import convert, prepare

    from compress.quant.int4 import quantize_embeddings, weight_precision

    names = [d.name for d in ctx.inputs]
    calibrated = config.algorithm in ("gptq", "awq")
    batches = _calibration_batches(ctx, names, config.samples, torch) if calibrated else None
    if batches is None:
        example = tuple(torch.zeros(d.shape, dtype=getattr(torch, d.dtype))
                        for d in ctx.inputs)
    else:
        example = batches[0]
    model = copy.deepcopy(ctx.torch_model(artifact)).eval()
    parameters = sum(p.numel() for p in model.parameters())
    label = f"neural-compressor {config.algorithm.upper()} int4" + (
        f" ({len(batches)} calibration samples)" if batches else "")
    with in_scratch_dir(), torch.no_grad(), warnings.catch_warnings(), \
            ctx.progress.task(label, None) as advance:
        warnings.simplefilter("ignore")  # AWQ traces the model: TracerWarnings by the page
        extra = {"example_inputs": _awq_example(example, names)} if config.algorithm == "awq" else {}
        try:
            prepared = prepare(model, _woq_config(config), **extra)
            for batch in batches or ():
                prepared(*batch)
                advance(1)
            quantized = convert(prepared)
            quantized(*example)  # INC unpacks its weights on the first call; export needs it
        except Exception as exc:  # noqa: BLE001 - INC's algorithms fail in many ways on
            # models that are not stacks of transformer blocks; say which, not a traceback
            raise ModelError(
                f"neural-compressor's {config.algorithm.upper()} failed on this model: "
                f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}. GPTQ and AWQ "
                "expect transformer-style models of Linear layers; try algorithm: rtn, or "
                "backend onnxruntime") from None
    modules = {n: m for n, m in quantized.named_modules()
               if type(m).__name__ == "INCWeightOnlyLinear"}
    with tempfile.TemporaryDirectory() as scratch:
        exported = Path(scratch) / "dequantized.onnx"
        export_quantized(quantized, example, exported, ctx)
        replaced = pack_matmul_nbits(exported, modules, target)
    meta = {"backend": "neural-compressor", "algorithm": config.algorithm,
            "block_size": config.block_size, "symmetric": config.symmetric,
            "calibration_samples": len(batches) if batches else 0,
            "incweightonly_modules": len(modules), "matmuls_packed": replaced}
    if config.embeddings_quantized:  # INC quantizes Linear layers only
        meta["embeddings_quantized"] = quantize_embeddings(target, config)
    meta["weights"] = weight_precision(None, target, parameters=parameters)
    return meta


def pack_matmul_nbits(source: Path, modules: dict, target: Path) -> int:
    """Replace each MatMul whose constant weight equals an INC module's dequantized weight
    by MatMulNBits holding that module's 4-bit integers, scales and zero points."""
    import onnx
    from onnx import helper, numpy_helper

    from compress.quant.int4 import gemm_to_matmul
    from compress.quant.nbits_pack import from_inc

    model = onnx.load(str(source))
    gemm_to_matmul(model)  # 2-D Linear layers export as Gemm
    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    weights = {name: m.recover().float().T.numpy() for name, m in modules.items()}  # [K, N]
    nodes, dropped = [], set()
    for node in graph.node:
        weight = initializers.get(node.input[1]) if node.op_type == "MatMul" else None
        if weight is None or len(weight.dims) != 2:
            nodes.append(node)
            continue
        b = numpy_helper.to_array(weight)
        matches = [(float(np.abs(w - b).max()), n) for n, w in weights.items() if w.shape == b.shape]
        error, name = min(matches, default=(np.inf, None))
        if error > 1e-3:  # a MatMul INC did not quantize (e.g. a skipped head)
            nodes.append(node)
            continue
        module = modules[name]
        packed = from_inc(module.unpack(), module.group_size)
        inputs = [node.input[0], f"{node.input[1]}_Q4", f"{node.input[1]}_scales"]
        new = [numpy_helper.from_array(packed.packed, inputs[1]),
               numpy_helper.from_array(packed.scales, inputs[2])]
        if packed.zero_points is not None:
            inputs.append(f"{node.input[1]}_zero_points")
            new.append(numpy_helper.from_array(packed.zero_points, inputs[3]))
        k_in, n_out, block = packed.k, packed.n, packed.block
        graph.initializer.extend(new)
        dropped.add(node.input[1])
        nodes.append(helper.make_node("MatMulNBits", inputs, list(node.output),
                                      name=f"{node.name}_Q4", domain="com.microsoft",
                                      K=k_in, N=n_out, bits=4, block_size=block))
    del graph.node[:]
    graph.node.extend(nodes)
    keep = [i for i in graph.initializer if i.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(target))
    return len(dropped)
