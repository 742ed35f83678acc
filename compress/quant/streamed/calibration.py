"""Activation ranges for int8-static, measured on the float model without a copy of it:
onnxruntime runs the model's own graph with the wanted tensors added as outputs, reading
the weights from the source file where they lie (through a link in the stage's folder),
and the ranges are reduced as onnxruntime's calibrators reduce them (MinMaxCalibrater:
the least minimum and greatest maximum over the feeds; histograms by its
HistogramCollector for percentile and entropy)."""
from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np


def _link(source: Path, link: Path) -> None:
    """`link` names `source`'s bytes: a hard link, else a symbolic one, else a copy."""
    for make in (os.link, os.symlink, shutil.copyfile):
        try:
            make(source, link)
            return
        except OSError:
            link.unlink(missing_ok=True)
    raise OSError(f"cannot link or copy {source} to {link}")


@dataclass(frozen=True)
class FloatGraph:
    """The float model as calibration reads it, without a copy of its weights: the graph
    with their data left out, and where each weight's bytes lie in the source file."""
    model: object          # a ModelProto, its initializers without data
    spans: dict            # initializer name -> streamed.Span


@contextlib.contextmanager
def float_session(source: FloatGraph, outputs: list[str], folder: Path):
    """An onnxruntime session of `source` that also returns `outputs`, graph
    optimisations off as its calibrators run it; its files are removed after."""
    import onnx
    import onnxruntime as ort
    model = onnx.ModelProto()
    model.CopyFrom(source.model)
    known = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in outputs if n not in known)
    links, made = {}, []
    try:
        for tensor in model.graph.initializer:
            span = source.spans.get(tensor.name)
            if span is None:
                continue
            if span.path not in links:
                links[span.path] = folder / f"calibration-{len(links)}.bin"
                _link(span.path, links[span.path])
                made.append(links[span.path])
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", links[span.path].name),
                               ("offset", str(span.offset)), ("length", str(span.length))):
                tensor.external_data.add(key=key, value=value)
        path = folder / "calibration.onnx"
        made.append(path)
        onnx.save_model(model, str(path))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 3
        yield ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    finally:
        for path in made:
            path.unlink(missing_ok=True)


def _minmax(batches: dict) -> dict:
    """MinMaxCalibrater.compute_data on per-feed minima and maxima."""
    return {name: (np.nanmin(lows, axis=0), np.nanmax(highs, axis=0))
            for name, (lows, highs) in batches.items()}


def calibrate(source: FloatGraph, tensors: list[str], feeds: list[dict], config,
              folder: Path, advance) -> object:
    """onnxruntime's TensorsData (tensor -> range) of `tensors` over `feeds`, run on
    `source`'s graph with its weights where its spans say."""
    from onnxruntime.quantization.calibrate import (CalibrationMethod, HistogramCollector,
                                                    TensorsData)
    method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
              "percentile": CalibrationMethod.Percentile}[config.calibration]
    kept = {name: [] for name in tensors}
    extremes = {name: ([], []) for name in tensors}
    with float_session(source, tensors, folder) as session:
        inputs = {i.name for i in session.get_inputs()}
        for feed in feeds:
            values = session.run(tensors, {k: v for k, v in feed.items() if k in inputs})
            for name, value in zip(tensors, values):
                if method == CalibrationMethod.MinMax:  # the calibrator's ReduceMin/Max
                    extremes[name][0].append(np.min(value, keepdims=True).reshape(-1))
                    extremes[name][1].append(np.max(value, keepdims=True).reshape(-1))
                else:
                    kept[name].append(value)
            advance(1)
    if method == CalibrationMethod.MinMax:
        return TensorsData(method, _minmax(extremes))
    # the settings quantize_static (percentile) and the stage (entropy) give the calibrator
    entropy = method == CalibrationMethod.Entropy
    collector = HistogramCollector(
        method=config.calibration, symmetric=not entropy,
        num_bins=config.entropy_bins if entropy else 2048, num_quantized_bins=128,
        percentile=config.percentile, scenario="same")
    collector.collect(kept)
    return TensorsData(method, collector.compute_collection_result())
