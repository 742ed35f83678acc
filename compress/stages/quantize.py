"""`quantize`: the schemes of compress/quant/schemes/ (int8-static QDQ, int8-dynamic,
INT4 weight-only MatMulNBits, fp16 with onnxruntime; int8-qat and neural-compressor from
torch; ai-edge-quantizer for a TFLite model), each with its settings class there;
optionally accuracy-aware (`max_drop`)."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path
from typing import Annotated, Optional, Union

from pydantic import Field, ValidationError

from compress.core.artifacts import Output, artifact_files
from compress.core.safe_files import make_dir, remove
from compress.errors import ConfigError, ModelError
from compress.core.lazy import require
from compress.quant.onnx_prep import opset_for, static_shapes
from compress.quant.ort_int8 import op_histogram, preprocess
from compress.quant.schemes import SCHEMES, scheme_configs, scheme_of_setting
from compress.stagebase import register, settings_error
from export import presets
from runtimes.suggest import IN_BETWEEN, did_you_mean

# the stage in a pipeline: one settings class per scheme, chosen by `scheme`
QuantizeConfig = Annotated[Union[scheme_configs()], Field(discriminator="scheme")]


class _ByScheme(type):
    """Quantize's class: calling it builds the settings class of the scheme named;
    isinstance holds for any scheme's settings."""

    def __call__(cls, /, *args, **settings):
        if args:
            raise ConfigError("Quantize takes its settings by name (Quantize(scheme="
                              f"'int8-static', ...)), not {len(args)} positional value(s)")
        scheme = settings.pop("scheme", None)
        known = ", ".join(SCHEMES)
        if scheme is None:
            raise _scheme_error(f"required key is missing: give `scheme=`, one of {known}")
        if not isinstance(scheme, str) or scheme not in SCHEMES:
            raise _scheme_error(f"unknown scheme {scheme!r}"   # as the YAML says it
                                f"{did_you_mean(scheme, SCHEMES, IN_BETWEEN)}. Known schemes: "
                                f"{known}")
        config_cls = SCHEMES[scheme].config_cls
        for setting in settings:   # the YAML's hint: a setting of another scheme
            others = scheme_of_setting(setting)
            if setting not in config_cls.model_fields and others:
                error = ConfigError(f"Quantize(scheme={scheme!r}): {setting}: a setting of "
                                    f"{', '.join(others)}, not of {scheme}: remove it (or "
                                    "change the scheme)")
                error.field = setting
                raise error
        try:
            return config_cls.model_validate({**settings, "scheme": scheme})
        except ValidationError as exc:
            raise settings_error(f"Quantize(scheme={scheme!r})", exc, config_cls) from None

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, scheme_configs())

    def __subclasscheck__(cls, sub) -> bool:
        return isinstance(sub, type) and issubclass(sub, scheme_configs())


def _scheme_error(message: str) -> ConfigError:
    error = ConfigError(f"Quantize: scheme: {message}")
    error.field = "scheme"
    return error


class Quantize(metaclass=_ByScheme):
    """The quantize stage from Python: `Quantize(scheme="int8-static", calibration=
    "entropy")` is the scheme's settings (Int8Static here), as `{type: quantize, scheme:
    int8-static, calibration: entropy}` in the YAML; a mistake is the ConfigError the YAML
    gives, naming the setting."""


def _torch_module(node) -> Optional[str]:
    """The torch module an ONNX node came from, as the dynamo exporter records it
    (`pkg.torch.onnx.name_scopes`: [..., 'encoder.layer.5.attention.self.value',
    'linear_32']); None for models from elsewhere."""
    import ast
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return None
            return scopes[-2] if len(scopes) >= 2 and scopes[-2] else None
    return None


def _accuracy_aware(quantize_one, source: Path, target: Path, config, ctx) -> dict:
    from compress.quant.accuracy_aware import Budget, keep, search
    from compress.model.onnx_file import header_model

    require("onnx", "quantize")
    kinds = SCHEMES[config.scheme].searchable
    graph = header_model(source).graph  # the graph alone: the weights stay on disk
    weights = {init.name for init in graph.initializer}
    # only layers with a constant weight: a MatMul of two activations (attention) is
    # never quantized by these schemes, so keeping it in float changes nothing
    chosen = [n for n in graph.node
              if n.op_type in kinds and n.name and n.name not in config.exclude_nodes
              and len(n.input) > 1 and n.input[1] in weights]
    layers = [n.name for n in chosen]
    with ctx.progress.task(f"{config.scheme} with max_drop {config.max_drop}: keeping layers "
                           "in float until the accuracy drop fits", None) as advance:
        def evaluate(path: Path) -> float:
            advance(1)
            return ctx.score(path)["value"]
        budget = Budget(ctx.metric_baseline(), config.max_drop)
        best, report = search(quantize_one, evaluate, budget, layers, ctx.out_dir,
                              note=ctx.progress.note)
    keep(best, target)
    modules = {n.name: _torch_module(n) for n in chosen}
    for row in report["sensitivity"]:
        row["module"] = modules.get(row["layer"])
    report["kept_in_float_modules"] = [modules.get(name) for name in report["kept_in_float"]]
    if not report["budget_met"]:
        ctx.progress.note(f"max_drop {config.max_drop} not reached: keeping the best model "
                          f"found (accuracy drop {best.drop:.4f}, {len(best.excluded)} layers "
                          "in float)")
    return {**best.meta, "accuracy_aware": report}


@contextlib.contextmanager
def _quiet_quantizer_logs():
    """onnxruntime's quantizers log advice through the root logger (e.g. 'consider
    pre-processing' when `preprocess: false` was chosen on purpose) and a line per node
    through their own; keep the output clean."""
    loggers = [logging.getLogger(), logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer"),
               logging.getLogger("neural_compressor")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _from_torch(artifact, config, ctx) -> list[Output]:
    """The schemes that start from a torch model and hand on an ONNX one: check the
    input, import the library (first: neural-compressor sets its logger's level on
    import, which the quieting undoes; both print CUDA kernel load failures to the
    terminal), then the scheme's torch function."""
    spec = SCHEMES[config.scheme]
    module, quantize = spec.torch
    what = config.scheme if config.backend == "onnxruntime" else f"backend {config.backend}"
    if artifact.format != "torch":
        raise ModelError(f"{what} takes a torch model but got {artifact.format} artifact "
                         f"{artifact.id}; give it `input: source` (or a prune/distill stage)"
                         + (", or use backend onnxruntime" if module.startswith("neural") else ""))
    from export.quiet import native_output_hidden
    with native_output_hidden():
        require(module, what)
    target = ctx.out_dir / "model.onnx"
    with _quiet_quantizer_logs():
        meta = quantize(ctx, artifact, config, target)
    meta.update(scheme=config.scheme, ops=dict(op_histogram(target)))
    return [Output(target, "onnx", spec.precision, meta)]


@register(QuantizeConfig, tag="quantize", api_class=Quantize)
def run(artifact, config, ctx) -> list[Output]:
    spec = SCHEMES[config.scheme]
    if spec.lm is not None:
        with _quiet_quantizer_logs():
            return spec.lm(artifact, config, ctx)
    if spec.onnx is None or config.backend != "onnxruntime":
        return _from_torch(artifact, config, ctx)
    if artifact.format == "tflite":
        from compress.quant.tflite.quantize import quantize_stage
        return quantize_stage(artifact, config, ctx, spec.tflite_mode, spec.precision)
    return _onnx(ctx.path(artifact), config, ctx)


def _onnx(source: Path, config, ctx) -> list[Output]:
    """onnxruntime's quantizers on an ONNX file, prepared first (opset, static shapes,
    quant_pre_process) as the scheme needs; a large model tensor by tensor instead
    (compress/quant/streamed/backends.py), its graph prepared in memory."""
    require("onnxruntime.quantization", "quantize")
    committed, source = source, _own_input(source, ctx.out_dir)
    try:
        return _quantized(committed, source, config, ctx)
    finally:
        remove(source.parent)


def _own_input(source: Path, out_dir: Path) -> Path:
    """The model, as the quantizer's input, in this stage's own folder (`input/`: hard
    links of its files, copies where the file system has none). onnxruntime writes beside
    its input (`<model>-inferred.onnx`, left cut short on a full disk) and the input's
    own folder is the previous stage's, committed: nothing may appear there."""
    folder = make_dir(out_dir / "input", fresh=True)
    for part in artifact_files(source):
        dest = folder / Path(part).relative_to(source.parent)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(part, dest)
        except OSError:
            shutil.copyfile(part, dest)
    return folder / source.name


def _quantized(committed: Path, source: Path, config, ctx) -> list[Output]:
    """_onnx on `source`, the stage's own link of the `committed` model."""
    from compress.quant.streamed.backends import streamed_header
    spec = SCHEMES[config.scheme]
    shared = {"ops": op_histogram(source)}
    int8 = spec.precision == "int8"
    header = streamed_header(source, config, ctx.progress.note, spec.streamed is not None)
    upgraded, opset = (opset_for(source, config, ctx) if int8 and header is None
                       else (source, None))
    fixed, shapes = (static_shapes(upgraded, config, ctx) if config.static_shapes
                     else (upgraded, None))
    prepared = (preprocess(fixed, ctx.out_dir, ctx) if int8 and config.preprocess
                and header is None else fixed)
    target = ctx.out_dir / "model.onnx"
    if header is not None:
        def quantize_one(exclude, path):
            return spec.streamed(header, path, config, ctx, exclude, shared)
    else:
        def quantize_one(exclude, path):
            return spec.onnx(prepared, path, config, ctx, exclude, shared)
    try:
        with _quiet_quantizer_logs():
            meta = (quantize_one((), target) if config.max_drop is None
                    else _accuracy_aware(quantize_one, prepared, target, config, ctx))
    finally:
        (ctx.out_dir / "calibration_ranges.json").unlink(missing_ok=True)
    for temporary in {prepared, fixed, upgraded} - {source}:
        temporary.unlink()
    meta.update(_described(config, committed, target, int8),
                **_float_layers(target, ctx, int8 and header is None, config.scheme),
                **{key: value for key, value in (("opset_upgraded", opset),
                                                 ("static_shapes", shapes)) if value})
    return [Output(target, "onnx", spec.precision, meta)]


def _float_layers(target: Path, ctx, wanted: bool, scheme: str) -> dict:
    """The INT8 file's layers that still compute in float, with their measured share of its
    time (compress/quant/float_layers.py); none for other precisions and streamed files."""
    if not wanted:
        return {}
    import onnx
    from compress.quant.float_layers import float_layers, quantized_nothing
    model = onnx.load(str(target), load_external_data=False)
    nothing = quantized_nothing(model)
    if nothing:   # said loudly: an "INT8" artifact that is the float model, only bigger
        ctx.progress.note(f"{scheme}: {nothing}")
        return {"quantized_nothing": nothing}
    feeds, _ = ctx.sample_feeds(1)
    found = float_layers(target, model, feeds[0] if feeds else None)
    return {"float_layers": found} if found else {}


def _described(config, source: Path, target: Path, int8: bool) -> dict:
    """What the artifact's meta says of the quantized graph and how it was made."""
    meta = {"scheme": config.scheme, "ops": dict(op_histogram(target)),
            "excluded_nodes": list(config.exclude_nodes)}
    if int8:
        meta.update(per_channel=config.per_channel, activations=config.activations)
    if config.preset not in (None, presets.NONE):
        meta["preset"] = presets.record(config, config._preset_settings(presets.get(config.preset)))
    meta.update(config.graph_meta(source, target))   # what this scheme's graph holds
    return meta
