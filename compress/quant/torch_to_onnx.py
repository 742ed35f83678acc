"""Quantized torch models (PT2E graphs, INC modules) to ONNX, the way every quantize
path that starts from torch hands its result on."""
from __future__ import annotations

from pathlib import Path

from compress.errors import ModelError


def dynamic_batch_example(inputs: dict, names: list[str]) -> tuple[tuple, list | None]:
    """An example of two samples and a dynamic batch dimension for torch.export (an
    example of one sample specialises the batch to 1); static with a single sample."""
    import torch
    example = tuple(torch.from_numpy(inputs[n][:2]) for n in names)
    if len(example[0]) < 2:
        return example, None
    batch = torch.export.Dim("batch", min=1, max=1 << 16)
    return example, [{0: batch} for _ in names]


def export_quantized(model, example: tuple, path: Path, ctx) -> None:
    from export.onnx import ExportFailed, OnnxExport, export_onnx
    try:
        export_onnx(model, list(example), [d.name for d in ctx.pipeline.model.inputs], path,
                    OnnxExport(opset=18))
    except ExportFailed as exc:
        raise ModelError(f"the quantized torch model could not be exported to ONNX: {exc}") from None


def fold_weight_quantization(source: Path, target: Path) -> None:
    """PT2E's convert (INC's too) keeps float weights with a QuantizeLinear in front of
    them (the file is larger than FP32); onnxruntime's basic optimisation folds those into
    int8 initializers and leaves the QDQ graph otherwise as it is (standard ONNX ops)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(target)
    options.log_severity_level = 3
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
