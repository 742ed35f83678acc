"""`export.tflite`: torch model -> .tflite in fp32, fp16, dynamic-int8 or full int8,
checked against torch, and checked that what was promised to be int8 is int8."""
from __future__ import annotations

import os
from typing import Literal, Optional

import numpy as np
from pydantic import Field, PositiveInt, model_validator

from compress.artifacts import Output
from compress.errors import ModelError
from compress.lazy import require
from compress.stagebase import StageConfig, register
from compress.parity import parity_inputs, torch_outputs
from export import presets

PRECISION = {"fp32": "fp32", "fp16": "fp16", "dynamic-int8": "int8-dynamic", "int8": "int8"}


class ExportTflite(StageConfig):
    # 2: int8 output ranges widened to the float model's true extremes; 3: bias correction
    cache_version = 3
    type: Literal["export.tflite"] = "export.tflite"
    mode: Literal["fp32", "fp16", "dynamic-int8", "int8"] = Field(
        "fp32", description="fp16: fp16 weights; dynamic-int8: int8 weights, float "
        "activations; int8: full integer, calibrated on data.calibration")
    io: Optional[Literal["float", "int8"]] = Field(
        None, description="input/output type (default: int8 for mode int8, with scale and "
        "zero point recorded; float otherwise)")
    channels_last: bool = Field(False, description="NHWC image inputs, as TFLite users feed them")
    samples: PositiveInt = Field(256, description="calibration samples for mode int8")
    bias_correction: bool = Field(
        True, description="mode int8: sequential empirical bias correction of every "
        "convolution and fully connected layer against the float model")
    bias_correction_samples: PositiveInt = Field(
        64, description="calibration samples used for bias correction (spread evenly)")
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


def _calibration(ctx, config: ExportTflite, channels_last: bool) -> list[dict]:
    data = ctx.require_dataset("calibration", "export.tflite in mode int8")
    feeds = []
    for i in range(min(config.samples, len(data))):
        feed = {name: array[i:i + 1] for name, array in data.inputs.items()}
        if channels_last:
            feed = {k: v.transpose(0, 2, 3, 1) if v.ndim == 4 else v for k, v in feed.items()}
        feeds.append(feed)
    return feeds


def _bias_correction(fp32, target, calibration: list[dict], config: ExportTflite, ctx) -> dict:
    from export.tflite_bias_correction import correct_biases

    picks = np.unique(np.linspace(0, len(calibration) - 1,
                                  min(config.bias_correction_samples, len(calibration))).astype(int))
    feeds = [calibration[i] for i in picks]
    with ctx.progress.task(f"bias correction ({len(feeds)} samples)", None) as advance:
        return correct_biases(fp32, target, feeds, threads=os.cpu_count() or 1, advance=advance)


def _parity(path, inputs: dict, reference: list, channels_last: bool) -> dict:
    from runtimes.loader import load
    from runtimes.metrics import fidelity

    with load(str(path)) as session:
        name = session.inputs[0].name
        outputs = []
        for i in range(len(next(iter(inputs.values())))):
            x = next(iter(inputs.values()))[i:i + 1]
            outputs.append(session.run({name: x.transpose(0, 2, 3, 1) if channels_last and x.ndim == 4 else x})[0])
    return fidelity(np.concatenate(outputs), reference[0])


def _check_int8(report: dict, config: ExportTflite) -> None:
    if config.mode == "int8" and report["float32_tensors"]:
        names = ", ".join(report["float32_tensors"][:8])
        raise ModelError(f"mode int8 promised a full-integer model, but "
                         f"{len(report['float32_tensors'])} tensors stayed float32 ({names}); "
                         "those ops have no int8 kernel in TFLite: use mode dynamic-int8, or "
                         "the ONNX INT8 path")


@register(ExportTflite)
def run(artifact, config: ExportTflite, ctx) -> list[Output]:
    torch = require("torch", "export.tflite")
    from export.tflite import (ConversionFailed, convert_fp32, converter_logs_hidden, quantize,
                               tensor_report)

    model = ctx.torch_model(artifact)
    names = [d.name for d in ctx.pipeline.model.inputs]
    inputs, _ = parity_inputs(ctx, config.parity_samples)
    example = [torch.from_numpy(inputs[n][:1]) for n in names]
    fp32 = ctx.out_dir / ("model.tflite" if config.mode == "fp32" else "fp32.tflite")
    target, calibration, corrected = fp32, None, None
    ctx.progress.note(f"converting to TFLite ({config.mode})")
    with converter_logs_hidden():
        require("litert_torch", "export.tflite")
        try:
            convert_fp32(model, example, fp32, config.channels_last)
        except ConversionFailed as exc:
            raise ModelError(f"{exc}; or try another mode") from None
        if config.mode != "fp32":
            target = ctx.out_dir / "model.tflite"
            calibration = _calibration(ctx, config, config.channels_last) if config.mode == "int8" else None
            quantize(fp32, target, config.mode, calibration)
    if config.mode == "int8" and config.bias_correction:  # outside: it shows progress
        corrected = _bias_correction(fp32, target, calibration, config, ctx)
    with converter_logs_hidden():
        if target != fp32:
            fp32.unlink()
        report = tensor_report(target)
        _check_int8(report, config)
        single = {n: inputs[n] for n in names[:1]}
        reference = torch_outputs(model, names, inputs, torch)
        parity = _parity(target, single, reference, config.channels_last)
    if config.mode == "fp32" and not parity["cosine"] > 0.9999:
        raise ModelError(f"TFLite output differs from torch (cosine {parity['cosine']:.6f}, max abs "
                         f"error {parity['max_abs_error']:.3g}); try exporting ONNX instead")
    meta = {"mode": config.mode, "io": config.io_type, "channels_last": config.channels_last,
            "parity": {"worst": {"output": "output", **parity}}, "tensors": report}
    if corrected:
        meta["bias_correction"] = corrected
    if config.preset not in (None, presets.NONE):
        meta["preset"] = presets.record(config, presets.get(config.preset).for_tflite())
    return [Output(target, "tflite", PRECISION[config.mode], meta)]
