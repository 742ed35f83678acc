"""`export.tflite`: torch model -> .tflite in fp32, fp16, dynamic-int8 or full int8,
checked against torch, and checked that what was promised to be int8 is int8."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, PositiveInt, model_validator

from compress.core.artifacts import Output
from compress.errors import ModelError
from compress.core.lazy import require
from compress.quant.schemes.base import FloorSettings, Int8Refinements
from compress.stagebase import StageConfig, register
from compress.model.parity import parity_inputs, torch_outputs
from export import presets

PRECISION = {"fp32": "fp32", "fp16": "fp16", "dynamic-int8": "int8-dynamic", "int8": "int8"}


class ExportTflite(StageConfig, FloorSettings, Int8Refinements):
    # 2: int8 output ranges widened to the float model's true extremes; 3: bias correction
    # 4: the fast bias correction by default; 5: GPTQ rounding, both ranges, checked
    # 6: the fidelity floor and its recovery by mixed precision; 7: its take-backs from
    # the best state passed
    cache_version = 7
    type: Literal["export.tflite"] = Field("export.tflite", description="a torch model to "
                                           "TFLite (fp32, fp16, dynamic-int8, int8)")
    mode: Literal[presets.TFLITE_MODES] = Field(  # type: ignore[valid-type]
        "fp32", description="fp16: fp16 weights; dynamic-int8: int8 weights, float "
        "activations; int8: full integer, calibrated on data.calibration")
    io: Optional[Literal["float", "int8"]] = Field(
        None, description="input/output type (default: int8 for mode int8, with scale and "
        "zero point recorded; float otherwise)")
    channels_last: bool = Field(False, description="NHWC image inputs, as TFLite users feed them")
    samples: PositiveInt = Field(256, description="calibration samples for mode int8")
    activation_ranges: Literal["auto", "average", "minmax"] = Field(
        "auto", description="mode int8: how activation ranges are taken from the "
        "calibration data: average (ai-edge-quantizer's moving average of each sample's "
        "min and max), minmax (the extremes over all samples), or auto: both, the better "
        "on the calibration feeds kept (docs/tflite.md)")
    parity_samples: PositiveInt = Field(32, description="samples compared with torch")
    preset: presets.PresetName = Field(
        None, description="export preset (export/presets/) whose TFLite settings (mode, io, "
        "channels_last) fill the ones this stage leaves unset; default: the one the targets' "
        "profiles name (export.preset), among targets that run litert; 'none' for none")

    @property
    def io_type(self) -> str:
        return self.io or ("int8" if self.mode == "int8" else "float")

    @model_validator(mode="after")
    def _io_fits_mode(self):
        io = self.io_type
        if self.mode == "int8" and io == "float":
            raise ValueError("mode int8 quantizes the inputs and outputs too (ai-edge-quantizer "
                             "has no float-I/O option for full-integer models); use io: int8 — "
                             "the LiteRT runtime feeds float data through the recorded scale "
                             "and zero point — or mode dynamic-int8 for float I/O")
        if self.mode != "int8" and io == "int8":
            raise ValueError(f"io: int8 needs mode int8; mode {self.mode} keeps float I/O")
        return self

    def required_data(self) -> tuple[str, ...]:
        return ("calibration",) if self.mode == "int8" else ()

    def formats(self) -> dict[str, str]:
        return {"torch": "tflite"}

    def baseline_settings(self) -> dict:
        """How it is laid out and checked, not its quantization: FP32, no preset."""
        return {"channels_last": self.channels_last, "parity_samples": self.parity_samples,
                "mode": "fp32", "preset": "none"}

    def format_hint(self, given: str) -> str:
        if given == "tflite":
            return "the model is TFLite already: leave export.tflite out (quantize takes it)"
        return ("export.tflite converts a torch model; start the pipeline from the torch "
                "model (model.torch), or quantize the ONNX model with stage quantize")

    def for_targets(self, targets: list) -> "ExportTflite":
        # a mode set on the stage, or by the preset it names, wins over the targets' modes
        config = self if "mode" in self.model_fields_set or self._named_preset_sets_mode() \
            else self._mode_for(targets)
        mode = f" mode {config.mode}" if "mode" in config.model_fields_set else ""
        return presets.apply(config, targets, "litert", config._preset_settings,
                             f"export.tflite{mode}")

    def _preset_settings(self, preset) -> Optional[dict]:
        """What `preset` sets on this stage: its TFLite settings, which are for its mode
        (None for a preset without them, or when this stage has set another mode)."""
        settings = preset.for_tflite()
        if settings is None or ("mode" in self.model_fields_set
                                and settings.get("mode", self.mode) != self.mode):
            return None
        return settings

    def _named_preset_sets_mode(self) -> bool:
        named = self.preset not in (None, presets.NONE)
        return named and "mode" in (presets.get(self.preset).for_tflite() or {})

    def _mode_for(self, targets: list) -> "ExportTflite":
        """The mode the targets' profiles ask for (export.tflite_mode)."""
        wanted = {name: p.export.tflite_mode for name, p in targets if p.export.tflite_mode}
        modes = set(wanted.values())
        if len(modes) > 1:
            asked = ", ".join(f"{name} wants {mode}" for name, mode in wanted.items())
            raise ValueError(f"the targets ask for different TFLite modes ({asked}); set `mode` "
                             "on this stage, or add one export.tflite stage per mode")
        if not modes:
            return self
        mode = modes.pop()
        return presets.fill(self, {"mode": mode}, f"mode {mode} (asked for by {', '.join(wanted)})")


@register(ExportTflite)
def run(artifact, config: ExportTflite, ctx) -> list[Output]:
    torch = require("torch", "export.tflite")
    from compress.quant.tflite import quantize as post
    from export.tflite import ConversionFailed, convert_fp32, converter_logs_hidden, tensor_report

    model = ctx.torch_model(artifact)
    feeds, _ = parity_inputs(ctx, config.parity_samples)
    example = [torch.from_numpy(feeds[0][d.name]) for d in ctx.inputs]
    fp32 = ctx.out_dir / ("model.tflite" if config.mode == "fp32" else "fp32.tflite")
    target, meta = fp32, {}
    ctx.progress.note(f"converting to TFLite ({config.mode})")
    with converter_logs_hidden():
        require("litert_torch", "export.tflite")
        try:
            convert_fp32(model, example, fp32, config.channels_last)
        except ConversionFailed as exc:
            raise ModelError(f"{exc}; or try another mode") from None
        meta["tensors"] = tensor_report(fp32)
    if config.mode != "fp32":
        target = ctx.out_dir / "model.tflite"
        from compress.quant.passes.tflite_backend import Int8Settings
        meta = post.quantize_file(fp32, target, config.mode, ctx, {
            "samples": config.samples, "channels_last": config.channels_last,
            "int8": Int8Settings(config.activation_ranges,
                                 config.bias_method(),
                                 config.weight_rounding, config.bias_correction_samples,
                                 config.floor_db, config.recover),
            "purpose": "export.tflite in mode int8"})
        fp32.unlink()
    reference = torch_outputs(model, ctx.inputs, feeds, torch)
    with converter_logs_hidden():
        parity = post.parity(target, feeds, reference, config.channels_last)
    if config.mode == "fp32" and not parity["cosine"] > 0.9999:
        raise ModelError(f"TFLite output differs from torch (cosine {parity['cosine']:.6f}, max abs "
                         f"error {parity['max_abs_error']:.3g}); try exporting ONNX instead")
    meta.update(mode=config.mode, io=config.io_type, channels_last=config.channels_last,
                parity={"worst": {"output": "worst", **{k: v for k, v in parity.items()
                                                        if k != "outputs"}}})
    if config.preset not in (None, presets.NONE):
        meta["preset"] = presets.record(config, presets.get(config.preset).for_tflite())
    return [Output(target, "tflite", PRECISION[config.mode], meta)]
