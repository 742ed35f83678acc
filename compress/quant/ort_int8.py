"""onnxruntime INT8: static (QDQ, calibrated: the quantizer int8-static's passes work around,
compress/quant/passes/) and dynamic quantization."""
from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compress.errors import ModelError
from compress.core.lazy import require
from compress.core.library_errors import blame_library
from compress.core.scratch import in_scratch_dir

# Measured here (x86-64 with AVX-512 VNNI, 2 threads, onnxruntime 1.31, batch 1): dynamic
# INT8 turns every Conv into ConvInteger, which has no fast kernel. EfficientNet-Lite0:
# 102 ms vs 6.1 ms and 77 ms vs 5.9 ms FP32 in two runs (13-17x slower, top-1 agreement
# 0.69); quickstart CNN: 4.8x slower.
CONV_DYNAMIC_WARNING = (
    "int8-dynamic turns every Conv into ConvInteger, which onnxruntime runs far slower than "
    "float: measured 13-17x slower than FP32 on EfficientNet-Lite0 and 4.8x slower on the "
    "quickstart CNN. Use `scheme: int8-static` with calibration data for convolutional "
    "models, or set `force: true` to quantize dynamically anyway")


def op_histogram(path: Path) -> Counter:
    require("onnx", "quantize")
    # the graph alone: onnx.load reads inline weights too (1 GB for a 1 GB model)
    from compress.model.onnx_file import header_model
    return Counter(node.op_type for node in header_model(path).graph.node)


def preprocess(source: Path, out_dir: Path, ctx) -> Path:
    with in_scratch_dir():  # its symbolic shape inference writes temporary files into "."
        return _preprocess(Path(source).resolve(), Path(out_dir).resolve() / "preprocessed.onnx",
                           ctx)


def _preprocess(source: Path, target: Path, ctx) -> Path:
    from onnxruntime.quantization.shape_inference import quant_pre_process

    failed = ""
    if _needs_symbolic_shapes(source):
        try:
            quant_pre_process(str(source), str(target))
            return target
        except Exception as exc:  # noqa: BLE001 - its symbolic shape inference fails on some ops
            failed = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    # e.g. ReduceL2 (F.normalize) has no symbolic shape rule and the next Expand crashes;
    # the rest of the pre-processing (ONNX shape inference, graph optimisation) still helps.
    try:
        quant_pre_process(str(source), str(target), skip_symbolic_shape=True)
    except Exception as exc:  # noqa: BLE001
        before = f"{failed}; " if failed else ""
        ctx.progress.note(f"onnxruntime's pre-processing for quantization (quant_pre_process) "
                          f"failed ({before}without symbolic shapes: {type(exc).__name__}); "
                          "quantizing the model as exported")
        target.unlink(missing_ok=True)
        return source
    if failed:
        ctx.progress.note(f"onnxruntime's symbolic shape inference failed ({failed}); "
                          "pre-processed for quantization with ONNX's own shape inference")
    return target


def _needs_symbolic_shapes(source: Path) -> bool:
    """Whether ONNX's own shape inference leaves a node output without an element type or
    a rank. The quantizer reads only those; where ONNX infers them all, the symbolic
    inference made the same quantized bytes on every CNN of the corpus (its sympy
    import and walk cost 0.1-1.8 s, and it fails on YOLOv8n's Resize after ~1.5 s).
    The graph is read without its weights' data: inference needs their shapes only."""
    from compress.model.onnx_file import header_model, tensor_types

    try:
        model = header_model(source)
        typed = tensor_types(model)
    except Exception:  # noqa: BLE001 - onnx cannot infer it: let the symbolic pass try
        return True
    return any(name not in typed or not typed[name].elem_type
               or not typed[name].HasField("shape")
               for node in model.graph.node for name in node.output if name)


class _Reader:
    """Feeds the calibration feeds one model call at a time, advancing the progress bar."""

    def __init__(self, feeds: list[dict], advance):
        self._feeds, self._advance = feeds, advance
        self._next = 0

    def get_next(self):
        if self._next >= len(self._feeds):
            return None
        feed = self._feeds[self._next]
        self._next += 1
        self._advance(1)
        return feed

    def rewind(self):
        self._next = 0


def _static_options(source: Path, config, act, weight, exclude: list) -> tuple[dict, dict]:
    """(extra_options, other quantize_static arguments) for the types and symmetry the
    stage asks for, with onnxruntime's QNN config merged in for `qnn: true`."""
    extra = {"CalibPercentile": config.percentile} if config.calibration == "percentile" else {}
    if config.symmetric_activations:
        extra["ActivationSymmetric"] = True
    if config.symmetric_weights is not None:
        extra["WeightSymmetric"] = config.symmetric_weights
    if not config.quantize_bias:
        extra["QuantizeBias"] = False
    if not config.qnn:
        return extra, {}
    qnn = require("onnxruntime.quantization.execution_providers.qnn", "quantize with qnn: true")
    # the QNN config's per-op overrides (types HTP implements) and options; the stage's own
    # options go on top (they agree: the same types and symmetry are passed in)
    qnn_config = qnn.get_qnn_qdq_config(
        str(source), None, activation_type=act, weight_type=weight,
        per_channel=config.per_channel, activation_symmetric=config.symmetric_activations,
        weight_symmetric=config.symmetric_weights, nodes_to_exclude=exclude or None)
    return ({**qnn_config.extra_options, **extra},
            {"op_types_to_quantize": qnn_config.op_types_to_quantize})


@dataclass(frozen=True)
class StaticInputs:
    """What quantize_static is given besides the stage's settings."""
    source: Path          # the float model
    target: Path          # the QDQ model it writes
    feeds: list           # calibration feeds
    excluded: list        # node names kept in float
    cache: Path           # the calibration cache file: read where it exists, else written


# onnxruntime's quantizer failing inside itself on the user's graph (a weight it cannot
# take a scale of, a shape it cannot infer) is the model's problem: exit 2, not a bug
_TRY = ("leave that node in float (the quantize stage's `exclude_nodes`), "
        "`per_channel: false`, or `scheme: {other}` or `fp16`")


@blame_library("onnxruntime", what="quantize_static", hint=_TRY.format(other="int8-dynamic"))
def run_quantize_static(given: StaticInputs, config, ctx) -> None:
    """onnxruntime's quantize_static to QDQ, with the types, symmetry and QNN options the
    stage asks for. With a calibration cache file it reads the ranges from it; otherwise
    it calibrates on the feeds (entropy: with the stage's bins) and writes it."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    source, feeds, excluded, cache = given.source, given.feeds, given.excluded, given.cache
    # our own estimators hand their ranges over as a MinMax calibration cache
    method = {"entropy": CalibrationMethod.Entropy, "percentile": CalibrationMethod.Percentile
              }.get(config.calibration, CalibrationMethod.MinMax)
    act = QuantType[QUANT_TYPES[config.activations]]
    weight = QuantType[QUANT_TYPES[config.weights]]
    extra, more = _static_options(source, config, act, weight, excluded)
    calibrated = cache.is_file()
    task = (contextlib.nullcontext(lambda *a, **k: None) if calibrated else
            ctx.progress.task(f"calibrating ({config.calibration}, {len(feeds)} samples)",
                              len(feeds)))
    with task as advance:
        # with a cache file that exists, quantize_static reads the ranges and ignores the
        # reader; otherwise it calibrates with the reader and writes the file
        reader = None if calibrated else _Reader(feeds, advance)
        if reader is not None and config.calibration == "entropy":
            _entropy_ranges(source, reader, config, cache)
        quantize_static(str(source), str(given.target), reader, quant_format=QuantFormat.QDQ,
                        per_channel=config.per_channel, reduce_range=config.reduce_range,
                        activation_type=act, weight_type=weight,
                        nodes_to_exclude=excluded or None,
                        calibrate_method=method, extra_options=extra,
                        calibration_cache_path=cache, **more)


# the stage's type names -> onnxruntime's QuantType members
QUANT_TYPES = {"uint8": "QUInt8", "int8": "QInt8", "uint16": "QUInt16", "int16": "QInt16"}


def qdq_summary(path: Path) -> dict:
    """What the QDQ graph holds: how many activation QuantizeLinear nodes of each type,
    weight initializers of each type behind a DequantizeLinear, int32 biases, whether
    every zero point is the symmetric one, the weights' integer range, the Q/DQ domain."""
    onnx = require("onnx", "quantize")
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    inits = {i.name: i for i in graph.initializer}

    def zero_point(node):
        return numpy_helper.to_array(inits[node.input[2]]) if len(node.input) > 2 \
            and node.input[2] in inits else None

    def symmetric(points: list) -> bool | None:
        # zero point 0 for signed types, the middle of the range for unsigned ones
        if not points:
            return None
        return all(np.all(p == (0 if p.dtype.kind == "i" else 1 << (8 * p.dtype.itemsize - 1)))
                   for p in points)

    activations, weights, act_points, weight_points = Counter(), Counter(), [], []
    biases, low, high, domains = 0, 0, 0, set()
    for node in graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        domains.add(node.domain or "ai.onnx")
        if node.op_type == "QuantizeLinear" and zero_point(node) is not None:
            activations[str(zero_point(node).dtype)] += 1
            act_points.append(zero_point(node))
        elif node.op_type == "DequantizeLinear" and node.input[0] in inits:
            values = numpy_helper.to_array(inits[node.input[0]])
            if values.dtype == np.int32:
                biases += 1
                continue
            weights[str(values.dtype)] += 1
            low, high = min(low, int(values.min())), max(high, int(values.max()))
            if zero_point(node) is not None:
                weight_points.append(zero_point(node))
    return {"activation_types": dict(activations), "weight_types": dict(weights),
            "int32_biases": biases, "symmetric_activations": symmetric(act_points),
            "symmetric_weights": symmetric(weight_points), "weight_range": [low, high],
            "qdq_domains": sorted(domains)}


def _entropy_ranges(source: Path, reader: _Reader, config, cache: Path) -> None:
    """quantize_static does not pass `num_bins` on to the entropy calibrator (it silently
    uses 128 bins, which makes entropy equal MinMax); run the calibrator ourselves and hand
    the ranges over through the calibration cache file."""
    out_dir = cache.parent
    from onnxruntime.quantization.calibrate import (CalibrationMethod, create_calibrator,
                                                    save_tensors_data)
    calibrator = create_calibrator(
        str(source), augmented_model_path=str(out_dir / "augmented.onnx"),
        calibrate_method=CalibrationMethod.Entropy,
        extra_options={"num_bins": config.entropy_bins, "num_quantized_bins": 128})
    calibrator.collect_data(reader)
    ranges = calibrator.compute_data()
    (out_dir / "augmented.onnx").unlink(missing_ok=True)
    save_tensors_data(ranges, cache)


def refuse_convolutional(ops: Counter, config) -> None:
    """int8-dynamic on a model of mostly Conv layers needs `force: true`."""
    convs, matmuls = ops["Conv"], ops["MatMul"] + ops["Gemm"]
    if convs and convs >= matmuls and not config.force:
        raise ModelError(f"this model has {convs} Conv and {matmuls} MatMul/Gemm nodes. "
                         + CONV_DYNAMIC_WARNING)


@blame_library("onnxruntime", what="quantize_dynamic", hint=_TRY.format(other="int8-static"))
def quantize_dynamic_int8(source: Path, target: Path, config, ops: Counter,
                          exclude: tuple = ()) -> dict:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    refuse_convolutional(ops, config)
    quantize_dynamic(str(source), str(target), per_channel=config.per_channel,
                     reduce_range=config.reduce_range, weight_type=QuantType.QInt8,
                     extra_options={"MatMulConstBOnly": not config.activation_matmuls},
                     nodes_to_exclude=list(config.exclude_nodes) + list(exclude) or None)
    return {}
