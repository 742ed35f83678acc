"""What the quantize stage's schemes share: the settings every scheme has (QuantizeBase)
and those several have (a mixin each), and the back ends several schemes call. A setting
exists only on the schemes it means something for, so one set on another scheme is an
error naming the schemes that have it, never silently ignored. A value the scheme fixes
(int8-dynamic's uint8 activations) is a class constant, read like a setting."""
from __future__ import annotations

from typing import ClassVar, Literal, Optional, Union

from pydantic import BaseModel, Field, NonNegativeFloat, PositiveInt

from compress.stagebase import StageConfig
from export import presets
from profiles.schema import FLOOR_DB  # the same floor the verdicts judge variants by


class QuantizeBase(StageConfig):
    # 2: int4 schemes, asymmetric int4 by default, effective bits recorded; 3: presets,
    # the graph's Q/DQ types recorded; 4: one config class per scheme; 5: a TFLite model's
    # int8 rounded by GPTQ and checked over two range estimators; 6: a TFLite model's int8
    # held to the fidelity floor (passes/fidelity_floor/); 7: the recovery's take-backs
    # from the best state passed
    cache_version = 7
    type: Literal["quantize"] = Field("quantize", description="INT8, INT4 or fp16 "
                                      "quantization of an ONNX, TFLite or torch model")
    preset: presets.PresetName = Field(
        None, description="export preset (export/presets/) whose settings fill the ones this "
        "stage leaves unset; default: the one the targets' profiles name (export.preset); "
        "'none' for none")
    def bias_method(self) -> Optional[str]:
        """The bias correction run (see int8_static.bias_method)."""
        return None

    def streaming_refusal(self) -> Optional[str]:
        """The setting that keeps this scheme off the tensor-by-tensor path, if any."""
        return None

    def graph_meta(self, source, target) -> dict:
        """What the artifact's meta records of this scheme's quantized ONNX graph."""
        return {}

    def required_data(self) -> tuple[str, ...]:
        return ("evaluation",) if self.max_drop is not None else ()

    def formats(self) -> dict[str, str]:
        from compress.quant.schemes.registry import SCHEMES
        spec = SCHEMES[self.scheme]
        if spec.lm is not None:
            return {"genai": "genai"}
        if spec.onnx is None or self.backend != "onnxruntime":
            return {"torch": "onnx"}
        tflite = spec.tflite_mode and self.max_drop is None and not (
            self.qnn or self.static_shapes)
        return {"onnx": "onnx", **({"tflite": "tflite"} if tflite else {})}

    def format_hint(self, given: str) -> str:
        from compress.quant.schemes.registry import SCHEMES
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
class FloorSettings(BaseModel):
    """The fidelity floor's settings, the same for int8-static and export.tflite's int8
    (compress/quant/passes/fidelity_floor/; docs/int8.md, docs/tflite.md)."""
    floor_db: Optional[float] = Field(
        FLOOR_DB, description="int8: the least output SQNR (dB, the worst output, against "
        "the float model on the check's calibration feeds) the quantized model must keep; "
        "below it the model is recovered (`recover`) or a note says so; null: not checked")
    recover: bool = Field(
        True, description="int8: below floor_db, give the activations that cost the outputs "
        "most 16 bits (float where 16 are not enough or the op has none), one at a time "
        "until the floor holds, then take back each the floor holds without; every step is "
        "recorded. false: only say the model is below the floor")


# Bias correction when `bias_correction` is unset, ONNX and TFLite alike (docs/int8.md,
# docs/tflite.md): the fast correction, checked on the calibration feeds and kept where it
# helps (on TFLite alongside GPTQ rounding and two range estimators)
DEFAULT_BIAS_METHOD = "checked"


def bias_method(setting) -> Optional[str]:
    """A `bias_correction` setting (unset, true, false, fast, sequential) as the method
    run: None (off), checked, fast or sequential."""
    if setting is None:
        return DEFAULT_BIAS_METHOD
    return {False: None, True: "fast"}.get(setting, setting)


class Int8Refinements(BaseModel):
    """The INT8 refinements' settings, declared once for int8-static (ONNX) and
    export.tflite's int8 (compress/quant/passes/: one pass, a back end per format)."""
    # Measured on the conformance corpus (docs/int8.md): the fast correction lifted
    # EfficientNet-Lite0 (top-1 agreement 0.924 -> 0.971) and YOLOv8n (+2.1 dB) and cost
    # ddddocr's detector 1.5 dB, which the check on the calibration feeds catches; the
    # sequential one lowered YOLOv8n (29.4 -> 26.8 dB) and the orientation classifier and
    # took 6-16x longer. On full-int8 TFLite the fast correction (passes/fast_correction/tflite.py)
    # gave EfficientNet-Lite0 the sequential one's top-1 (0.962) with an export of 27.9 s
    # instead of 138 s, and CREPE 24.9 dB where the sequential one gave 25.5 (the default
    # since adds GPTQ rounding and a second range estimator: 0.971, 18.6 s; docs/tflite.md).
    bias_correction: Optional[Union[bool, Literal["fast", "sequential"]]] = Field(
        None, description="int8: undo the output mean shift quantization adds to every "
        "convolution and fully connected layer. Default (unset): the fast correction (one "
        "float pass), kept only where it raises the output SQNR on the calibration feeds "
        "(docs/int8.md, docs/tflite.md); true/fast: always; sequential: layer by layer with "
        "the int8 model (far slower); false: off")
    # 64: the pass over them is most of what the default adds to quantize_static's time;
    # 128 moved no CNN of the corpus by more than 0.3 dB (docs/rounding.md)
    bias_correction_samples: PositiveInt = Field(
        64, description="calibration samples used for bias correction and weight rounding "
        "(spread evenly)")
    # Measured on the corpus (docs/rounding.md): with GPTQ rounding EfficientNet-Lite0 went
    # from 23.1 to 25.1 dB and YOLOv8n from 30.0 to 31.3 dB; the default's check keeps, per
    # model, the best of as quantized / corrected / rounded (and corrected where that won).
    weight_rounding: Literal["nearest", "gptq"] = Field(
        "gptq", description="int8: how the weights are rounded: gptq, error-compensating "
        "against the layer's inputs on the calibration feeds (same scales, same speed), or "
        "nearest (quantize_static's, ai-edge-quantizer's); with bias_correction unset both "
        "are tried and the better kept")

    def bias_method(self) -> Optional[str]:
        return bias_method(self.bias_correction)


class OnnxruntimeOnly:
    backend: ClassVar[str] = "onnxruntime"


class NoSearch:
    max_drop: ClassVar[None] = None
    exclude_nodes: ClassVar[tuple] = ()


class NoQnn:
    qnn: ClassVar[bool] = False


class FromTorch(OnnxruntimeOnly, NoSearch, NoQnn):
    static_shapes: ClassVar[bool] = False


class OnnxShapes(QuantizeBase):
    static_shapes: bool = Field(
        False, description="fix every dynamic dimension to the shapes model.inputs declares "
        "before quantizing (NPUs and graph compilers compile one shape)")


class Searchable(OnnxShapes):
    exclude_nodes: tuple[str, ...] = Field((), description="node names to keep in float")
    max_drop: Optional[Union[NonNegativeFloat, Literal["targets"]]] = Field(
        None, description="accuracy-aware: the largest metric drop allowed ('targets': the "
        "tightest accuracy_drop budget of the pipeline's targets); layers that cost the "
        "most are kept in float until it holds")


class Int8Base(Searchable):
    per_channel: bool = Field(True, description="a scale per output channel of each weight "
                              "(per-tensor when false)")
    reduce_range: bool = Field(False, description="7-bit weights, for x86 CPUs without VNNI")
    preprocess: bool = Field(True, description="onnxruntime's quant_pre_process first")


def backend_field():
    # a FieldInfo of its own for each class that offers both back ends
    return Field("onnxruntime", description="onnxruntime: quantizes an ONNX artifact; "
                 "neural-compressor: quantizes a torch artifact and exports it to ONNX")


def streamed(back_end):
    """A scheme's `streamed=` registration: its model made tensor by tensor
    (compress/quant/streamed/) by `back_end(build, config, excluded, ctx, target, shared)`
    (`shared`: what the calls of an accuracy-aware search keep between them)."""
    def quantize(header, target, config, ctx, exclude, shared):
        from compress.quant.streamed.backends import quantize_streamed
        return quantize_streamed(header, target, config, exclude, lambda build, excluded:
                                 back_end(build, config, excluded, ctx, target, shared))
    return quantize


def neural_compressor(function: str) -> tuple[str, object]:
    """The torch back end of a scheme neural-compressor makes: compress/quant/inc.py's
    `function`, the library imported first."""
    def quantize(ctx, artifact, config, target):
        from compress.quant import inc
        return getattr(inc, function)(ctx, artifact, config, target)
    return "neural_compressor.torch.quantization", quantize
