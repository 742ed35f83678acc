"""Quantization-aware training with PT2E: the torch model is exported, fake-quantized with
the x86 quantizer's QAT configuration (int8 per-channel weights, uint8 activations, the
same kernels onnxruntime's QDQ models run fast), trained on data.train with the labels,
converted, and exported to ONNX as a QDQ model."""
from __future__ import annotations

import copy
import tempfile
from pathlib import Path

from compress.errors import DataError
from compress.core.lazy import require
from compress.quant.torch_to_onnx import (dynamic_batch_example, export_quantized,
                                          fold_weight_quantization)


def int8_qat(ctx, artifact, config, target: Path) -> dict:
    torch = require("torch", "quantize int8-qat")  # torchao: imported quietly by the stage
    from torchao.quantization.pt2e import allow_exported_model_train_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_qat_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer, get_default_x86_inductor_quantization_config)

    from compress.model.training import Objective, check_labels, train

    data = ctx.require_dataset("train", "quantize int8-qat").samples("int8-qat")
    if data.labels is None:
        raise DataError("int8-qat trains on labels, and data.train has none: return labels "
                        "with the training inputs")
    names = [d.name for d in ctx.inputs]
    model = copy.deepcopy(ctx.torch_model(artifact)).eval()
    example, dynamic = dynamic_batch_example(data.inputs, names)  # training batches vary
    graph = torch.export.export(model, example, dynamic_shapes=dynamic).module()
    quantizer = X86InductorQuantizer().set_global(
        get_default_x86_inductor_quantization_config(is_qat=True))
    prepared = prepare_qat_pt2e(graph, quantizer)
    allow_exported_model_train_eval(prepared)  # the training loop switches modes
    with torch.no_grad():
        classes = int(prepared(*example).shape[-1])
    check_labels(data.labels, classes)

    def loss_fn(m, inputs, labels):
        return torch.nn.functional.cross_entropy(m(*inputs), labels)

    evaluate = None
    if ctx.dataset("evaluation") is not None:
        from compress.model.torch_eval import torch_metric
        evaluate = lambda m: torch_metric(m, ctx)["value"]  # noqa: E731
    result = train(prepared, Objective(loss_fn, evaluate), data, config.train,
                   progress=ctx.progress, label="int8-qat")
    prepared.eval()
    quantized = convert_pt2e(prepared)
    single = tuple(torch.from_numpy(data.inputs[n][:1]) for n in names)
    with tempfile.TemporaryDirectory() as scratch:
        exported = Path(scratch) / "qdq.onnx"
        export_quantized(quantized, single, exported, ctx)
        fold_weight_quantization(exported, target)
    return {"qat": {"epochs_run": result.epochs_run, "best_epoch": result.best_epoch,
                    "best_metric": result.best_metric, "history": result.history},
            "quantizer": "torchao X86InductorQuantizer (QAT): int8 per-channel weights, "
                         "uint8 per-tensor activations"}
