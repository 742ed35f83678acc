"""The quantize stage's settings, one class per scheme (compress/quant/schemes.py): a
setting exists only on the schemes it means something for, so one set on another scheme
is an error naming the schemes that have it, never silently ignored. A value the scheme
fixes (int8-dynamic's uint8 activations) is a class constant, read like a setting."""
from __future__ import annotations

from typing import ClassVar, Literal, Optional, Union

from pydantic import Field, NonNegativeFloat, PositiveInt, field_validator, model_validator

from compress.stagebase import StageConfig
from compress.model.training import TrainSettings
from export import presets


class QuantizeBase(StageConfig):
    # 2: int4 schemes, asymmetric int4 by default, effective bits recorded; 3: presets,
    # the graph's Q/DQ types recorded; 4: one config class per scheme; 5: a TFLite model's
    # int8 rounded by GPTQ and checked over two range estimators
    cache_version = 5
    type: Literal["quantize"] = Field("quantize", description="INT8, INT4 or fp16 "
                                      "quantization of an ONNX, TFLite or torch model")
    preset: presets.PresetName = Field(
        None, description="export preset (export/presets/) whose settings fill the ones this "
        "stage leaves unset; default: the one the targets' profiles name (export.preset); "
        "'none' for none")
    def bias_method(self) -> Optional[str]:
        """The bias correction run (see schemes.bias_method)."""
        return None

    def required_data(self) -> tuple[str, ...]:
        return ("evaluation",) if self.max_drop is not None else ()

    def formats(self) -> dict[str, str]:
        from compress.quant.schemes import SCHEMES
        spec = SCHEMES[self.scheme]
        if spec.onnx is None or self.backend != "onnxruntime":
            return {"torch": "onnx"}
        tflite = spec.tflite_mode and self.max_drop is None and not (
            self.qnn or self.static_shapes)
        return {"onnx": "onnx", **({"tflite": "tflite"} if tflite else {})}

    def format_hint(self, given: str) -> str:
        from compress.quant.schemes import SCHEMES
        if given == "torch":
            return ("put an `export.onnx` (or `export.tflite`) stage before it, or quantize the "
                    "torch model with `backend: neural-compressor` or `scheme: int8-qat`")
        if given == "tflite":
            modes = [name for name, spec in SCHEMES.items() if spec.tflite_mode]
            return (f"a TFLite model takes schemes {', '.join(modes)}, without max_drop, "
                    "qnn or static_shapes")
        return "use backend onnxruntime (not int8-qat) on an ONNX model"

    def for_targets(self, targets: list):
        what = f"quantize {self.scheme}" + (
            f" with backend {self.backend}" if self.backend != "onnxruntime" else "")
        config = presets.apply(self, targets, "onnxruntime", self._preset_settings, what)
        return config._max_drop_for(targets)

    def _preset_settings(self, preset) -> Optional[dict]:
        """What `preset` sets on this stage; None where it has nothing for it."""
        if self.backend != "onnxruntime":
            return None
        return preset.for_quantize(self.scheme)

    def _max_drop_for(self, targets: list):
        if self.max_drop != "targets":
            return self
        budgets = {name: p.budget.accuracy_drop for name, p in targets
                   if p.budget.accuracy_drop is not None}
        if not budgets:
            raise ValueError("max_drop: targets needs a target profile with a "
                             "budget.accuracy_drop; give a number instead")
        return self.model_copy(update={"max_drop": min(budgets.values())})


# Settings other schemes have, as constants for the schemes that do not (read by the code
# every scheme goes through).
class _OnnxruntimeOnly:
    backend: ClassVar[str] = "onnxruntime"


class _NoSearch:
    max_drop: ClassVar[None] = None
    exclude_nodes: ClassVar[tuple] = ()


class _NoQnn:
    qnn: ClassVar[bool] = False


class _FromTorch(_OnnxruntimeOnly, _NoSearch, _NoQnn):
    static_shapes: ClassVar[bool] = False


class _OnnxShapes(QuantizeBase):
    static_shapes: bool = Field(
        False, description="fix every dynamic dimension to the shapes model.inputs declares "
        "before quantizing (NPUs and graph compilers compile one shape)")


class _Searchable(_OnnxShapes):
    exclude_nodes: tuple[str, ...] = Field((), description="node names to keep in float")
    max_drop: Optional[Union[NonNegativeFloat, Literal["targets"]]] = Field(
        None, description="accuracy-aware: the largest metric drop allowed ('targets': the "
        "tightest accuracy_drop budget of the pipeline's targets); layers that cost the "
        "most are kept in float until it holds")


class _Int8(_Searchable):
    per_channel: bool = Field(True, description="a scale per output channel of each weight "
                              "(per-tensor when false)")
    reduce_range: bool = Field(False, description="7-bit weights, for x86 CPUs without VNNI")
    preprocess: bool = Field(True, description="onnxruntime's quant_pre_process first")


def _backend():
    # a FieldInfo of its own for each class that offers both back ends
    return Field("onnxruntime", description="onnxruntime: quantizes an ONNX artifact; "
                 "neural-compressor: quantizes a torch artifact and exports it to ONNX")


class Int8Static(_Int8):
    scheme: Literal["int8-static"] = Field(
        "int8-static", description="int8-static: QDQ with calibrated activations (CNNs)")
    backend: Literal["onnxruntime", "neural-compressor"] = _backend()
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
    # Measured on the conformance corpus (docs/int8.md): the fast correction lifted
    # EfficientNet-Lite0 (top-1 agreement 0.924 -> 0.971) and YOLOv8n (+2.1 dB) and cost
    # ddddocr's detector 1.5 dB, which the check on the calibration feeds catches; the
    # sequential one lowered YOLOv8n (29.4 -> 26.8 dB) and the orientation classifier and
    # took 6-16x longer. On full-int8 TFLite the fast correction (tflite_fast_bias.py)
    # gave EfficientNet-Lite0 the sequential one's top-1 (0.962) with an export of 27.9 s
    # instead of 138 s, and CREPE 24.9 dB where the sequential one gave 25.5 (the default
    # since adds GPTQ rounding and a second range estimator: 0.971, 18.6 s; docs/tflite.md).
    bias_correction: Optional[Union[bool, Literal["fast", "sequential"]]] = Field(
        None, description="undo the output mean shift quantization adds to every Conv/Gemm. "
        "Default (unset): the fast correction (one float pass), kept only where it raises "
        "the output SQNR on the calibration feeds (TFLite: docs/tflite.md). true: fast, always; "
        "sequential: layer by layer with the quantized model (slow); false: off")
    # 64: the pass over them is most of what the default adds to quantize_static's time;
    # 128 moved no CNN of the corpus by more than 0.3 dB (docs/rounding.md)
    bias_correction_samples: PositiveInt = Field(
        64, description="calibration samples used for bias correction and weight rounding "
        "(spread evenly)")
    # Measured on the corpus (docs/rounding.md): with GPTQ rounding EfficientNet-Lite0 went
    # from 23.1 to 25.1 dB and YOLOv8n from 30.0 to 31.3 dB; the default's check keeps, per
    # model, the best of as quantized / corrected / rounded (and corrected where that won).
    weight_rounding: Literal["nearest", "gptq"] = Field(
        "gptq", description="how int8 weights are rounded (ONNX and TFLite): gptq, error-compensating "
        "against the layer's inputs on the calibration feeds (same scales, same speed), or "
        "nearest (quantize_static's)")

    def bias_method(self) -> Optional[str]:
        from compress.quant.schemes import bias_method
        return bias_method(self.bias_correction)

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


class Int8Dynamic(_OnnxruntimeOnly, _NoQnn, _Int8):
    scheme: Literal["int8-dynamic"] = Field(
        "int8-dynamic", description="int8-dynamic: weights int8, activations quantized at "
        "run time (MatMul-heavy models)")
    force: bool = Field(False, description="allow int8-dynamic on a convolutional model")
    activation_matmuls: bool = Field(
        False, description="also quantize MatMuls of two activations (a transformer's "
        "attention scores and values), not only those with weights")
    activations: ClassVar[str] = "uint8"   # onnxruntime's dynamic kernels
    weights: ClassVar[str] = "int8"


class Int4WeightOnly(_NoQnn, _Searchable):
    scheme: Literal["int4-weight-only"] = Field(
        "int4-weight-only", description="int4-weight-only: 4-bit block-wise MatMul (and "
        "embedding) weights, float activations")
    backend: Literal["onnxruntime", "neural-compressor"] = _backend()
    block_size: int = Field(32, description="weights per scale (a power of 2, >= 16)")
    symmetric: bool = Field(False, description="symmetric blocks (no zero point); "
                            "asymmetric kept MiniLM closer to FP32")
    algorithm: Literal["rtn", "hqq", "gptq", "awq"] = Field(
        "rtn", description="round-to-nearest; hqq (onnxruntime: half-quadratic, no data "
        "needed); gptq or awq (neural-compressor, calibrated on data.calibration)")
    samples: PositiveInt = Field(256, description="gptq/awq: calibration samples (at most)")
    accuracy_level: Optional[Literal[0, 1, 2, 3, 4]] = Field(
        None, description="MatMulNBits compute type (4: int8 compute, fastest on x86; 0/1: "
        "float32)")
    quantize_embeddings: Optional[bool] = Field(
        None, description="also quantize Gather embedding tables (GatherBlockQuantized); "
        "default: yes, except with hqq (onnxruntime's HQQ cannot)")

    @field_validator("block_size")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value < 16 or value & (value - 1):
            raise ValueError("block_size must be a power of 2 of at least 16 (16, 32, 64, 128)")
        return value

    @property
    def embeddings_quantized(self) -> bool:
        return self.algorithm != "hqq" if self.quantize_embeddings is None else self.quantize_embeddings

    def required_data(self) -> tuple[str, ...]:
        calibrated = ("calibration",) if self.algorithm in ("gptq", "awq") else ()
        return calibrated + super().required_data()

    @model_validator(mode="after")
    def _fits_backend(self):
        offered = {"onnxruntime": ("rtn", "hqq"), "neural-compressor": ("rtn", "gptq", "awq")}
        if self.algorithm not in offered[self.backend]:
            raise ValueError(f"algorithm {self.algorithm} is not offered by backend "
                             f"{self.backend} (it offers {', '.join(offered[self.backend])})")
        if self.algorithm == "hqq" and self.quantize_embeddings:
            raise ValueError("onnxruntime's HQQ quantizer cannot quantize embeddings (Gather); "
                             "set quantize_embeddings: false, or use algorithm: rtn")
        if self.backend == "neural-compressor" and self.max_drop is not None:
            raise ValueError("max_drop with backend neural-compressor is its autotune, which "
                             "tunes int8-static; for int4 use backend onnxruntime")
        if self.backend == "neural-compressor" and self.static_shapes:
            raise ValueError("static_shapes: for backend onnxruntime, which quantizes the "
                             "ONNX model (neural-compressor exports from torch)")
        return self


class Int8Qat(_FromTorch, QuantizeBase):
    scheme: Literal["int8-qat"] = Field(
        "int8-qat", description="int8-qat: quantization-aware training of a torch model "
        "(PT2E), exported to ONNX")
    train: TrainSettings = Field(
        default_factory=lambda: TrainSettings(epochs=3, lr=1e-4),
        description="fine-tuning with fake quantization on data.train")

    def required_data(self) -> tuple[str, ...]:
        return ("train",)


class Fp16(_OnnxruntimeOnly, _NoSearch, _NoQnn, _OnnxShapes):
    scheme: Literal["fp16"] = Field(
        "fp16", description="fp16: half-precision weights and compute (GPU targets)")
    keep_io_types: bool = Field(True, description="keep float32 inputs and outputs")


SCHEME_CONFIGS = (Int8Static, Int8Dynamic, Int4WeightOnly, Int8Qat, Fp16)
