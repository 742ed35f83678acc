"""`quantize` for ONNX models with onnxruntime: int8-static (QDQ), int8-dynamic, INT4
weight-only (MatMulNBits), fp16; optionally accuracy-aware (`max_drop`)."""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import Field, NonNegativeFloat, PositiveInt, field_validator, model_validator

from compress.artifacts import Output
from compress.errors import ModelError
from compress.lazy import require
from compress.quant.onnx_prep import opset_for, static_shapes
from compress.quant.ort_int8 import (op_histogram, preprocess, qdq_summary,
                                     quantize_dynamic_int8, quantize_static_qdq)
from compress.stagebase import StageConfig, register
from compress.training import TrainSettings
from export import presets

PRECISION = {"int8-static": "int8", "int8-dynamic": "int8", "int8-qat": "int8",
             "int4-weight-only": "int4", "fp16": "fp16"}
# Settings that mean something for some schemes only: set on another, they would be
# silently ignored, so they are an error (a setting absent here applies to every scheme).
ONLY_FOR = {
    **dict.fromkeys(("calibration", "percentile", "entropy_bins", "bias_correction",
                     "bias_correction_samples", "weights", "symmetric_activations",
                     "symmetric_weights", "quantize_bias", "qnn"), ("int8-static",)),
    **dict.fromkeys(("force", "activation_matmuls"), ("int8-dynamic",)),
    **dict.fromkeys(("block_size", "symmetric", "algorithm", "accuracy_level",
                     "quantize_embeddings"), ("int4-weight-only",)),
    "activations": ("int8-static", "int8-dynamic"), "keep_io_types": ("fp16",),
    "train": ("int8-qat",), "samples": ("int8-static", "int4-weight-only"),
}
# A TFLite model is quantized by ai-edge-quantizer: scheme -> its mode (compress/quant/tflite.py)
TFLITE_MODES = {"int8-static": "int8", "int8-dynamic": "dynamic-int8", "fp16": "fp16"}
# Layers the accuracy-aware search may keep in float, per scheme.
SEARCHABLE = {"int8-static": ("Conv", "MatMul", "Gemm"), "int8-dynamic": ("MatMul", "Gemm"),
              "int4-weight-only": ("MatMul", "Gemm")}


class Quantize(StageConfig):
    # 2: int4 schemes, asymmetric int4 by default, effective bits recorded; 3: presets,
    # the graph's Q/DQ types recorded
    cache_version = 3
    type: Literal["quantize"] = Field("quantize", description="INT8, INT4 or fp16 "
                                      "quantization of an ONNX, TFLite or torch model")
    backend: Literal["onnxruntime", "neural-compressor"] = Field(
        "onnxruntime", description="onnxruntime: quantizes an ONNX artifact; "
        "neural-compressor: quantizes a torch artifact (int8-static via PT2E, "
        "int4-weight-only with rtn/gptq/awq) and exports the result to ONNX")
    scheme: Literal["int8-static", "int8-dynamic", "int8-qat", "int4-weight-only", "fp16"] = Field(
        description="int8-static: QDQ with calibrated activations (CNNs); int8-dynamic: "
        "weights int8, activations quantized at run time (MatMul-heavy models); "
        "int4-weight-only: 4-bit block-wise MatMul (and embedding) weights, float "
        "activations; fp16: half-precision weights and compute (GPU targets); int8-qat: "
        "quantization-aware training of a torch model (PT2E), exported to ONNX")
    # int8-static
    calibration: Literal["minmax", "entropy", "percentile"] = Field(
        "minmax", description="int8-static: how activation ranges are chosen from the "
        "calibration data")
    percentile: float = Field(99.999, gt=90, lt=100, description="for calibration: percentile")
    entropy_bins: PositiveInt = Field(2048, description="histogram bins for entropy calibration")
    samples: PositiveInt = Field(256, description="calibration samples to use (at most)")
    per_channel: bool = Field(True, description="a scale per output channel of each weight "
                              "(per-tensor when false)")
    activations: Literal["uint8", "int8", "uint16", "int16"] = Field(
        "uint8", description="uint8 activations + int8 weights (U8S8) get onnxruntime's fast "
        "x86 kernels; int8 (S8S8) leaves many convs in float on x86; uint16/int16 (A16W8) "
        "for NPUs that run 16-bit activations (Qualcomm HTP), in float on a CPU")
    weights: Literal["int8", "uint8"] = Field("int8", description="int8-static: weight type")
    reduce_range: bool = Field(False, description="7-bit weights, for x86 CPUs without VNNI")
    symmetric_activations: bool = Field(
        False, description="int8-static: activation ranges centred on 0 (zero point 0 for "
        "int8; TensorRT needs it)")
    symmetric_weights: Optional[bool] = Field(
        None, description="int8-static: weights with zero point 0 (default: onnxruntime's, "
        "symmetric for signed weights)")
    quantize_bias: bool = Field(
        True, description="int8-static: int32 biases behind a DequantizeLinear (false: float "
        "biases, as TensorRT takes them)")
    qnn: bool = Field(
        False, description="int8-static: onnxruntime's QNN config (get_qnn_qdq_config): the "
        "per-op type overrides Qualcomm's HTP needs")
    static_shapes: bool = Field(
        False, description="fix every dynamic dimension to the shapes model.inputs declares "
        "before quantizing (NPUs and graph compilers compile one shape)")
    preset: presets.PresetName = Field(
        None, description="export preset (export/presets/) whose settings fill the ones this "
        "stage leaves unset; default: the one the targets' profiles name (export.preset); "
        "'none' for none")
    preprocess: bool = Field(True, description="onnxruntime's quant_pre_process first (int8)")
    # By format, as measured on the conformance corpus (docs/conformance.md): on ONNX QDQ it
    # lowered fidelity on the YOLOv8n detector (SQNR 29.4 -> 26.8 dB) and the orientation
    # classifier (32.6 -> 24.9 dB) and took 15-50x longer than quantizing (it helped
    # EfficientNet-Lite0); on full-int8 TFLite it helped CREPE (24.5 -> 25.5 dB) and
    # EfficientNet-Lite0.
    bias_correction: Optional[bool] = Field(
        None, description="int8-static: sequential empirical bias correction of every "
        "Conv/Gemm (undoes the mean shift quantization adds, layer by layer); default: off "
        "for ONNX, on for a TFLite model (measured per format, docs/conformance.md)")
    bias_correction_samples: PositiveInt = Field(
        128, description="calibration samples used for bias correction (spread evenly)")
    force: bool = Field(False, description="allow int8-dynamic on a convolutional model")
    activation_matmuls: bool = Field(
        False, description="int8-dynamic: also quantize MatMuls of two activations (a "
        "transformer's attention scores and values), not only those with weights")
    # int4-weight-only
    block_size: int = Field(32, description="int4: weights per scale (a power of 2, >= 16)")
    symmetric: bool = Field(False, description="int4: symmetric blocks (no zero point); "
                            "asymmetric kept MiniLM closer to FP32")
    algorithm: Literal["rtn", "hqq", "gptq", "awq"] = Field(
        "rtn", description="int4: round-to-nearest; hqq (onnxruntime: half-quadratic, no "
        "data needed); gptq or awq (neural-compressor, calibrated on data.calibration)")
    accuracy_level: Optional[Literal[0, 1, 2, 3, 4]] = Field(
        None, description="int4: MatMulNBits compute type (4: int8 compute, fastest on x86; "
        "0/1: float32)")
    quantize_embeddings: Optional[bool] = Field(
        None, description="int4: also quantize Gather embedding tables (GatherBlockQuantized); "
        "default: yes, except with hqq (onnxruntime's HQQ cannot)")
    # int8-qat
    train: TrainSettings = Field(
        default_factory=lambda: TrainSettings(epochs=3, lr=1e-4),
        description="int8-qat: fine-tuning with fake quantization on data.train")
    # fp16
    keep_io_types: bool = Field(True, description="fp16: keep float32 inputs and outputs")
    # every scheme but fp16
    exclude_nodes: tuple[str, ...] = Field((), description="node names to keep in float")
    max_drop: Optional[Union[NonNegativeFloat, Literal["targets"]]] = Field(
        None, description="accuracy-aware: the largest metric drop allowed ('targets': the "
        "tightest accuracy_drop budget of the pipeline's targets); layers that cost the "
        "most are kept in float until it holds")

    @field_validator("block_size")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value < 16 or value & (value - 1):
            raise ValueError("block_size must be a power of 2 of at least 16 (16, 32, 64, 128)")
        return value

    def corrects_biases(self, fmt: str) -> bool:
        """Whether int8-static corrects biases for a model of this format."""
        return self.bias_correction if self.bias_correction is not None else fmt == "tflite"

    @property
    def embeddings_quantized(self) -> bool:
        return self.algorithm != "hqq" if self.quantize_embeddings is None else self.quantize_embeddings

    @model_validator(mode="after")
    def _backend_offers_it(self):
        offered = {"onnxruntime": {"int8-static", "int8-dynamic", "int8-qat", "int4-weight-only",
                                   "fp16"},
                   "neural-compressor": {"int8-static", "int4-weight-only"}}[self.backend]
        if self.scheme not in offered:
            raise ValueError(f"backend {self.backend} does not offer scheme {self.scheme} "
                             f"(it offers {', '.join(sorted(offered))}); use backend "
                             "onnxruntime on an ONNX artifact")
        algorithms = {"onnxruntime": ("rtn", "hqq"), "neural-compressor": ("rtn", "gptq", "awq")}
        if self.scheme == "int4-weight-only" and self.algorithm not in algorithms[self.backend]:
            raise ValueError(f"algorithm {self.algorithm} is not offered by backend {self.backend} "
                             f"(it offers {', '.join(algorithms[self.backend])})")
        if self.backend == "neural-compressor" and self.max_drop is not None \
                and self.scheme != "int8-static":
            raise ValueError("max_drop with backend neural-compressor is its autotune, which "
                             "tunes int8-static; for int4 use backend onnxruntime")
        return self

    @model_validator(mode="after")
    def _settings_mean_something(self):
        ignored = [name for name in sorted(self.model_fields_set)
                   if self.scheme not in ONLY_FOR.get(name, (self.scheme,))]
        if ignored:
            which = "; ".join(f"{n} is for {' or '.join(ONLY_FOR[n])}" for n in ignored)
            raise ValueError(f"setting(s) that do nothing with scheme {self.scheme}: {which}. "
                             "Remove them")
        if "percentile" in self.model_fields_set and self.calibration != "percentile" or \
                "entropy_bins" in self.model_fields_set and self.calibration != "entropy":
            raise ValueError("percentile goes with `calibration: percentile`, entropy_bins "
                             "with `calibration: entropy`")
        return self

    @model_validator(mode="after")
    def _hqq_skips_embeddings(self):
        if self.algorithm == "hqq" and self.quantize_embeddings:
            raise ValueError("onnxruntime's HQQ quantizer cannot quantize embeddings (Gather); "
                             "set quantize_embeddings: false, or use algorithm: rtn")
        return self

    @model_validator(mode="after")
    def _max_drop_fits_scheme(self):
        if self.max_drop is not None and self.scheme in ("fp16", "int8-qat"):
            raise ValueError(f"max_drop needs layers that can be kept in float after "
                             f"quantization; {self.scheme} converts the whole model (use "
                             "int8-static, int8-dynamic or int4-weight-only)")
        return self

    @model_validator(mode="after")
    def _settings_fit_scheme(self):
        static = self.scheme == "int8-static" and self.backend == "onnxruntime"
        if not static and (self.qnn or self.activations in ("uint16", "int16")):
            what = "qnn" if self.qnn else f"activations {self.activations}"
            raise ValueError(f"{what} is for scheme int8-static with backend onnxruntime "
                             f"(this stage: {self.scheme}, {self.backend})")
        if self.static_shapes and (self.backend != "onnxruntime" or self.scheme == "int8-qat"):
            raise ValueError("static_shapes fixes the ONNX model the onnxruntime back end "
                             "quantizes; int8-qat and neural-compressor export from torch with "
                             "the declared shapes (set dynamic_batch: false)")
        return self

    def formats(self) -> dict[str, str]:
        if self.scheme == "int8-qat" or self.backend == "neural-compressor":
            return {"torch": "onnx"}
        tflite = self.scheme in TFLITE_MODES and self.max_drop is None and not (
            self.qnn or self.static_shapes)
        return {"onnx": "onnx", **({"tflite": "tflite"} if tflite else {})}

    def format_hint(self, given: str) -> str:
        if given == "torch":
            return ("put an `export.onnx` (or `export.tflite`) stage before it, or quantize the "
                    "torch model with `backend: neural-compressor` or `scheme: int8-qat`")
        if given == "tflite":
            return (f"a TFLite model takes schemes {', '.join(TFLITE_MODES)}, without max_drop, "
                    "qnn or static_shapes")
        return "use backend onnxruntime (not int8-qat) on an ONNX model"

    def required_data(self) -> tuple[str, ...]:
        calibrated = self.scheme == "int8-static" or self.algorithm in ("gptq", "awq")
        needed = ("calibration",) if calibrated else ()
        needed += ("train",) if self.scheme == "int8-qat" else ()
        return needed + (("evaluation",) if self.max_drop is not None else ())

    def for_targets(self, targets: list) -> "Quantize":
        what = f"quantize {self.scheme}" + (
            f" with backend {self.backend}" if self.backend != "onnxruntime" else "")
        config = presets.apply(self, targets, "onnxruntime", self._preset_settings, what)
        return config._max_drop_for(targets)

    def _preset_settings(self, preset) -> Optional[dict]:
        """What `preset` sets on this stage; None where it has nothing for it."""
        if self.backend != "onnxruntime":
            return None
        return preset.for_quantize(self.scheme)

    def _max_drop_for(self, targets: list) -> "Quantize":
        if self.max_drop != "targets":
            return self
        budgets = {name: p.budget.accuracy_drop for name, p in targets
                   if p.budget.accuracy_drop is not None}
        if not budgets:
            raise ValueError("max_drop: targets needs a target profile with a "
                             "budget.accuracy_drop; give a number instead")
        return self.model_copy(update={"max_drop": min(budgets.values())})


def _quantizer(config: Quantize, source: Path, ops, ctx, header=None):
    """One function for every scheme: (nodes kept in float, target path) -> meta. Calls
    for int8-static share one calibration (the file is removed by the caller). With the
    header of a large model, its weights are quantized tensor by tensor."""
    if header is not None:
        from compress.quant.streamed import quantize_streamed
        if config.scheme == "int8-dynamic":
            from compress.quant.ort_int8 import refuse_convolutional
            refuse_convolutional(ops, config)
        ranges = {}  # int8-static: calibrated once for every call
        return lambda exclude, target: quantize_streamed(header, target, config, ctx, exclude,
                                                         ranges)
    if config.scheme == "int8-static":
        ranges = ctx.out_dir / "calibration_ranges.json"
        return lambda exclude, target: quantize_static_qdq(source, target, config, ctx, exclude,
                                                           ranges)
    if config.scheme == "int8-dynamic":
        return lambda exclude, target: quantize_dynamic_int8(source, target, config, ops, exclude)
    if config.scheme == "int4-weight-only":
        from compress.quant.int4 import quantize_int4
        return lambda exclude, target: quantize_int4(source, target, config, exclude)
    from compress.quant.fp16 import convert_fp16
    return lambda exclude, target: convert_fp16(source, target, config)


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


def _accuracy_aware(quantize_one, source: Path, target: Path, config: Quantize, ctx) -> dict:
    from compress.quant.accuracy_aware import keep, search
    from compress.quant.onnx_file import header_model

    require("onnx", "quantize")
    kinds = SEARCHABLE[config.scheme]
    graph = header_model(source).graph  # the graph alone: the weights stay on disk
    weights = {init.name for init in graph.initializer}
    # only layers with a constant weight: a MatMul of two activations (attention) is
    # never quantized by these schemes, so keeping it in float changes nothing
    chosen = [n for n in graph.node
              if n.op_type in kinds and n.name and n.name not in config.exclude_nodes
              and len(n.input) > 1 and n.input[1] in weights]
    layers = [n.name for n in chosen]
    with ctx.progress.task(f"accuracy-aware {config.scheme} (max_drop {config.max_drop})",
                           None) as advance:
        def evaluate(path: Path) -> float:
            advance(1)
            return ctx.score(path)["value"]
        best, report = search(quantize_one, evaluate, ctx.metric_baseline(), layers,
                              config.max_drop, ctx.out_dir, note=ctx.progress.note)
    keep(best, target)
    modules = {n.name: _torch_module(n) for n in chosen}
    for row in report["sensitivity"]:
        row["module"] = modules.get(row["layer"])
    report["kept_in_float_modules"] = [modules.get(name) for name in report["kept_in_float"]]
    if not report["budget_met"]:
        ctx.progress.note(f"max_drop {config.max_drop} not reached: keeping the best model "
                          f"found (drop {best.drop:.4f}, {len(best.excluded)} layers in float)")
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


def _from_torch(artifact, config: Quantize, ctx, what: str, module: str, quantize) -> list[Output]:
    """The schemes that start from a torch model and hand on an ONNX one: check the
    input, import the library (first: neural-compressor sets its logger's level on
    import, which the quieting undoes; both print CUDA kernel load failures to the
    terminal), then `quantize(ctx, artifact, config, target) -> meta`."""
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
    return [Output(target, "onnx", PRECISION[config.scheme], meta)]


@register(Quantize)
def run(artifact, config: Quantize, ctx) -> list[Output]:
    if config.scheme == "int8-qat":
        from compress.quant.qat import int8_qat
        return _from_torch(artifact, config, ctx, "int8-qat", "torchao.quantization.pt2e",
                           int8_qat)
    if config.backend == "neural-compressor":
        from compress.quant import inc
        quantize = inc.int8_static if config.scheme == "int8-static" else inc.int4_weight_only
        return _from_torch(artifact, config, ctx, "backend neural-compressor",
                           "neural_compressor.torch.quantization", quantize)
    if artifact.format == "tflite":
        from compress.quant.tflite import quantize_stage
        return quantize_stage(artifact, config, ctx, TFLITE_MODES[config.scheme],
                              PRECISION[config.scheme])
    return _onnx(ctx.path(artifact), config, ctx)


def _onnx(source: Path, config: Quantize, ctx) -> list[Output]:
    """onnxruntime's quantizers on an ONNX file, prepared first (opset, static shapes,
    quant_pre_process) as the scheme needs; a large model tensor by tensor instead
    (compress/quant/streamed.py), its graph prepared in memory."""
    require("onnxruntime.quantization", "quantize")
    from compress.quant.streamed import streamed_header
    ops_before = op_histogram(source)
    int8 = config.scheme.startswith("int8")
    header = streamed_header(source, config, ctx.progress.note)
    upgraded, opset = (opset_for(source, config, ctx) if int8 and header is None
                       else (source, None))
    fixed, shapes = (static_shapes(upgraded, config, ctx) if config.static_shapes
                     else (upgraded, None))
    prepared = (preprocess(fixed, ctx.out_dir, ctx) if config.preprocess and int8
                and header is None else fixed)
    target = ctx.out_dir / "model.onnx"
    quantize_one = _quantizer(config, prepared, ops_before, ctx, header)
    try:
        with _quiet_quantizer_logs():
            if config.max_drop is None:
                meta = quantize_one((), target)
            else:
                meta = _accuracy_aware(quantize_one, prepared, target, config, ctx)
    finally:
        (ctx.out_dir / "calibration_ranges.json").unlink(missing_ok=True)
    for temporary in {prepared, fixed, upgraded} - {source}:
        temporary.unlink()
    meta.update(_described(config, source, target, int8),
                **{key: value for key, value in (("opset_upgraded", opset),
                                                 ("static_shapes", shapes)) if value})
    return [Output(target, "onnx", PRECISION[config.scheme], meta)]


def _described(config: Quantize, source: Path, target: Path, int8: bool) -> dict:
    """What the artifact's meta says of the quantized graph and how it was made."""
    meta = {"scheme": config.scheme, "ops": dict(op_histogram(target)),
            "excluded_nodes": list(config.exclude_nodes)}
    if int8:
        meta.update(per_channel=config.per_channel, activations=config.activations)
    if config.scheme == "int8-static":
        meta["qdq"] = qdq_summary(target)
    if config.preset not in (None, presets.NONE):
        meta["preset"] = presets.record(config, config._preset_settings(presets.get(config.preset)))
    if config.scheme == "int4-weight-only":
        from compress.quant.int4 import weight_precision
        meta["weights"] = weight_precision(source, target)
    return meta
