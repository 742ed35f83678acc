"""`export.openvino`: an ONNX artifact (the FP32 export, or the quantize stage's INT8 QDQ
file) to OpenVINO IR, checked against onnxruntime on the same feeds."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, PositiveFloat, PositiveInt

from compress.core.artifacts import Output
from compress.errors import ModelError
from compress.core.lazy import require
from compress.core.library_errors import blame_library
from compress.model.parity import parity_inputs
from compress.stagebase import StageConfig, register


class ExportOpenVino(StageConfig):
    type: Literal["export.openvino"] = Field(
        "export.openvino", description="an ONNX artifact to OpenVINO IR (model.xml + "
        "model.bin), checked against onnxruntime")
    weights: Literal["fp32", "fp16"] = Field(
        "fp32", description="how the IR stores float weights: fp16 halves the file "
        "(OpenVINO computes in `inference_precision` either way)")
    inference_precision: Optional[Literal["f32", "bf16", "f16"]] = Field(
        None, description="the precision OpenVINO computes float layers in when this IR is "
        "benchmarked: f32 (default; a CPU with bf16 would otherwise use bf16), or bf16 / f16 "
        "as a named variant")
    parity_samples: PositiveInt = Field(16, description="feeds compared with onnxruntime")
    max_error: PositiveFloat = Field(
        0.05, description="allowed largest output difference from onnxruntime on the ONNX "
        "input, relative to the largest output (f32 computes as onnxruntime does; "
        "an INT8 file's integer arithmetic differs in rounding)")

    def formats(self) -> dict[str, str]:
        return {"onnx": "openvino"}

    def format_hint(self, given: str) -> str:
        return ("export the model to ONNX first (export.onnx), then to OpenVINO IR"
                if given == "torch" else "export.openvino converts an ONNX model")


@register(ExportOpenVino)
def run(artifact, config: ExportOpenVino, ctx) -> list[Output]:
    require("openvino", "export.openvino")
    from compress.model.run import run_feeds
    from export.onnx import parity
    from export.openvino import convert

    source, path = ctx.path(artifact), ctx.out_dir / "model.xml"
    ctx.progress.note(f"converting {artifact.id} to OpenVINO IR ({config.weights} weights)")
    with blame_library("OpenVINO", what="openvino.convert_model", hint=(
            "measure the ONNX file with onnxruntime instead (leave out export.openvino), "
            "or replace that op in the model")):
        info = convert(source, path, config.weights == "fp16")
    feeds, feeds_source = parity_inputs(ctx, config.parity_samples)
    check = parity(path, feeds, run_feeds(source, None, feeds))
    worst = check["worst"]
    limit = config.max_error * max(worst["max_abs_reference"], 1e-6)
    if not worst["max_abs_error"] <= limit:
        raise ModelError(
            f"the OpenVINO IR's output '{worst['output']}' differs from onnxruntime's on "
            f"{artifact.id} by {worst['max_abs_error']:.3g} (allowed {limit:.3g}, max_error "
            f"{config.max_error:g} of the largest output) on {check['samples']} feeds from "
            f"{feeds_source}; raise "
            "max_error if this is the INT8 rounding of another engine")
    # an INT8 or FP16 ONNX file stays what it is; an FP32 one's weights are as asked
    precision = artifact.precision if artifact.precision != "fp32" else config.weights
    return [Output(path, "openvino", precision,
                   {**info, "inference_precision": config.inference_precision or "f32",
                    "parity": check, "parity_inputs": feeds_source})]
