"""`export.onnx`: torch model -> one ONNX file, verified against torch."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt

from compress.core.artifacts import Output
from compress.errors import ModelError
from compress.core.lazy import require
from compress.model.parity import parity_inputs, torch_outputs
from compress.stagebase import StageConfig, register


class ExportOnnx(StageConfig):
    type: Literal["export.onnx"] = Field("export.onnx", description="a torch model to one "
                                         "ONNX file, checked against torch")
    opset: int = Field(18, ge=13, le=23, description="ONNX opset to ask the exporter for")
    exporter: Literal["dynamo", "legacy"] = Field(
        "dynamo", description="torch.onnx's default (dynamo) or the TorchScript-based one")
    parity_samples: PositiveInt = Field(32, description="feeds compared with torch")
    atol: PositiveFloat = Field(1e-4, description="allowed error: atol + rtol * max|torch output|")
    rtol: PositiveFloat = Field(1e-3, description="allowed error relative to the largest "
                                "torch output (see atol)")

    def formats(self) -> dict[str, str]:
        return {"torch": "onnx"}

    def format_hint(self, given: str) -> str:
        return ("the model is ONNX already: leave export.onnx out" if given == "onnx" else
                "start the pipeline from the torch model (model.torch) to export it to ONNX")


@register(ExportOnnx)
def run(artifact, config: ExportOnnx, ctx) -> list[Output]:
    torch = require("torch", "export.onnx")
    require("onnxscript", "export.onnx with the dynamo exporter")
    from export.onnx import ExportFailed, OnnxExport, export_onnx, parity

    model = ctx.torch_model(artifact)
    spec = ctx.pipeline.model
    names = [d.name for d in ctx.inputs]
    feeds, parity_source = parity_inputs(ctx, config.parity_samples)
    first = feeds[0]
    # A dynamic batch must be traced with a batch other than 1: exporters specialise 1.
    example = [torch.from_numpy(np.resize(first[n], (2, *first[n].shape[1:]))
                                if spec.dynamic_batch else first[n]) for n in names]
    path = ctx.out_dir / "model.onnx"
    ctx.progress.note(f"exporting to ONNX (opset {config.opset}, {config.exporter} exporter)")
    try:
        info = export_onnx(model, example, names, path, OnnxExport(
            config.opset, dynamic_batch=spec.dynamic_batch, exporter=config.exporter))
    except ExportFailed as exc:
        raise ModelError(f"{exc}. Try `exporter: legacy` or another opset") from None
    check = parity(path, feeds, torch_outputs(model, ctx.inputs, feeds, torch))
    worst = check["worst"]
    limit = config.atol + config.rtol * worst["max_abs_reference"]
    if not worst["max_abs_error"] <= limit:
        raise ModelError(
            f"ONNX output '{worst['output']}' differs from torch by {worst['max_abs_error']:.3g} "
            f"(allowed {limit:.3g}) on {check['samples']} feeds from {parity_source}; shapes "
            f"{worst['shape']} vs {worst['expected_shape']}. Try `exporter: legacy`, another "
            "opset, or raise atol/rtol if the model is numerically sensitive")
    return [Output(path, "onnx", "fp32", {**info, "parity": check,
                                          "parity_inputs": parity_source})]
