"""int8-static: QDQ with calibrated activation ranges (onnxruntime's quantize_static and
the INT8 passes of compress/quant/passes/), ai-edge-quantizer's full int8 for a TFLite
model, neural-compressor from a torch model; its settings and its registration."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, PositiveInt, model_validator

from compress.quant.schemes.base import (FloorSettings, Int8Base, Int8Refinements,
                                         backend_field, neural_compressor, streamed)
from compress.quant.schemes.registry import register_scheme

class Int8Static(Int8Refinements, Int8Base, FloorSettings):  # its bias_method first
    scheme: Literal["int8-static"] = Field(
        "int8-static", description="int8-static: QDQ with calibrated activations (CNNs)")
    backend: Literal["onnxruntime", "neural-compressor"] = backend_field()
    calibration: Literal["minmax", "entropy", "percentile", "mean_minmax", "mse"] = Field(
        "minmax", description="how activation ranges are chosen from the calibration data: "
        "minmax (onnxruntime's), entropy, percentile, mean_minmax (mean over feeds of each "
        "feed's min and max) or mse (the range that minimises uint8 quantization error); "
        "minmax was the only one never clearly worse on the corpus (docs/int8.md)")
    equalize: bool = Field(
        False, description="cross-layer equalization first (Conv pairs joined by ReLU and "
        "the like; not through ReLU6): for ReLU networks with very unequal channel ranges, "
        "per-tensor weights above all")
    # Measured on the orientation classifier, the corpus' one network with hard-swish
    # into depthwise convolutions (docs/rounding.md): 288 evaluation feeds' logits 25.3 ->
    # 31.8 dB (NNCF 29.6), at by hand's speed or better
    equalize_hard_swish: Optional[bool] = Field(
        None, description="scale channels through hard-swish into depthwise convolutions "
        "so their uint8 input steps suit each channel, every op still integer. Default "
        "(unset): done where the model has such layers and kept where it raises the output "
        "SQNR on the calibration feeds; true: always; false: off")
    percentile: float = Field(99.999, gt=90, lt=100, description="for calibration: percentile")
    entropy_bins: PositiveInt = Field(2048, description="histogram bins for entropy calibration")
    samples: PositiveInt = Field(256, description="calibration samples to use (at most)")
    activations: Literal["uint8", "int8", "uint16", "int16"] = Field(
        "uint8", description="uint8 activations + int8 weights (U8S8) get onnxruntime's fast "
        "x86 kernels; int8 (S8S8) leaves many convs in float on x86; uint16/int16 (A16W8) "
        "for NPUs that run 16-bit activations (Qualcomm HTP), in float on a CPU")
    weights: Literal["int8", "uint8"] = Field("int8", description="weight type")
    symmetric_activations: bool = Field(
        False, description="activation ranges centred on 0 (zero point 0 for int8; TensorRT "
        "needs it)")
    symmetric_weights: Optional[bool] = Field(
        None, description="weights with zero point 0 (default: onnxruntime's, symmetric for "
        "signed weights)")
    quantize_bias: bool = Field(
        True, description="int32 biases behind a DequantizeLinear (false: float biases, as "
        "TensorRT takes them)")
    qnn: bool = Field(
        False, description="onnxruntime's QNN config (get_qnn_qdq_config): the per-op type "
        "overrides Qualcomm's HTP needs")
    def required_data(self) -> tuple[str, ...]:
        return ("calibration",) + super().required_data()

    @model_validator(mode="after")
    def _fits_backend(self):
        if self.backend == "neural-compressor":
            onnx_only = [n for n in ("qnn", "static_shapes") if getattr(self, n)]
            onnx_only += ["activations " + self.activations] if "16" in self.activations else []
            if onnx_only:
                raise ValueError(f"{', '.join(onnx_only)}: for backend onnxruntime, which "
                                 "quantizes the ONNX model (neural-compressor exports from "
                                 "torch with the declared shapes)")
        if "percentile" in self.model_fields_set and self.calibration != "percentile" or \
                "entropy_bins" in self.model_fields_set and self.calibration != "entropy":
            raise ValueError("percentile goes with `calibration: percentile`, entropy_bins "
                             "with `calibration: entropy`")
        return self

    def graph_meta(self, source, target) -> dict:
        from compress.quant.ort_int8 import qdq_summary
        return {"qdq": qdq_summary(target)}

    def streaming_refusal(self) -> Optional[str]:
        if self.qnn:
            return "qnn"
        if "16" in self.activations:
            return f"activations {self.activations}"
        from compress.quant.passes import streaming_refused
        return streaming_refused(self)


def _static_streamed(build, config, excluded, ctx, target, shared):
    from compress.quant.streamed.static import static
    # the calibrated ranges kept between the calls of an accuracy-aware search
    return static(build, config, ctx, excluded, target.parent, shared.setdefault("ranges", {}))


@register_scheme(Int8Static, "int8", 1, streamed=streamed(_static_streamed), tflite_mode="int8",
                 searchable=("Conv", "MatMul", "Gemm"), torch=neural_compressor("int8_static"))
def _int8_static(source, target, config, ctx, exclude, shared):
    from compress.quant.passes.onnx_backend import quantize_static_qdq
    # one calibration for every call on this model (the accuracy-aware search's attempts)
    ranges = shared.setdefault("ranges", ctx.out_dir / "calibration_ranges.json")
    return quantize_static_qdq(source, target, config, ctx, exclude, ranges)
