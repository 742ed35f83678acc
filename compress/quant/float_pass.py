"""The float model's pass that int8-static's weight rounding and bias correction take
(passes/gptq_rounding/, passes/fast_correction/): for every quantized Conv / Gemm, its input's mean per
channel, plain and as its QuantizeLinear sees it; H = E[x x^T] of its input for GPTQ
(hessian.py); the float model's outputs, which the check scores candidates against.

Two ways to make it:
  layer_pass(float_model, qdq, feeds)
      one run of the float model over `feeds`, after quantize_static calibrated with
      a run of its own;
  calibrating_pass(...), then its Calibrated.layer_pass(float_model, qdq, feeds)
      the run that finds quantize_static's MinMax ranges (every calibrated tensor's
      lowest and highest value: ranges.py writes them as the cache quantize_static
      reads) also takes, on the chosen feeds, what does not depend on the
      quantization: the plain means, H, the outputs. Calibrated.layer_pass then runs
      the float model once more for the quantized means alone, which need the ranges.
The second saves one of the three float runs the stage made, and onnxruntime's
calibration run with a ReduceMin and a ReduceMax per tensor, which was the slower of
the two (docs/rounding.md, "Compression time").
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from compress.quant.layer_pairs import Layer, float_layers, matched_layers


def _channel_mean(x: np.ndarray) -> np.ndarray:
    """Per-channel (axis 1) mean in float64, the positions summed in x's float32 first:
    numpy's pairwise summation along the contiguous axis keeps the float32 rounding error
    growing with log n (far below an int8 step), and runs twice as fast as a float64
    reduction over every axis but one."""
    sums = x.reshape(x.shape[0], x.shape[1], -1).sum(axis=2).astype(np.float64).sum(axis=0)
    return sums / (x.size // x.shape[1])


def _quantized_mean(x: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """The per-channel mean of x after its QuantizeLinear / DequantizeLinear pair, in x's
    own precision as the runtime computes it (x / scale, rounded half to even): the
    integers less the zero point, clipped to the type's range less it (the same
    integers as adding it, clipping and taking it off again, in one pass fewer), their
    mean dequantized once. In place: this runs on every layer input of every feed."""
    info, offset = np.iinfo(zero.dtype), zero.item()
    q = np.divide(x, scale.astype(x.dtype))
    np.rint(q, out=q)
    np.clip(q, info.min - offset, info.max - offset, out=q)
    return _channel_mean(q) * scale.item()  # one scale per tensor


@dataclass(frozen=True)
class Chosen:
    """The feeds (by index) on which the calibrating run also takes what layer_pass
    would take from them, and what of it beside the plain means: H, the float outputs."""
    indices: list
    hessians: bool = False
    outputs: bool = False


@dataclass
class Calibrated:
    """What the calibrating run took: every calibrated tensor's ranges.TensorStats (over
    all feeds), and on the chosen feeds each float layer input's plain mean (by tensor),
    H per float layer (by its output's name) and the float outputs."""
    stats: dict
    plain: dict
    hessians: dict
    outputs: list | None
    float32: bool = True    # every calibrated tensor was (a float16 one ranges in float16)
    chosen: list = field(default_factory=list)  # indices of the feeds the pass took
    channels: dict = field(default_factory=dict)  # {tensor: (low, high) per channel}

    def minmax(self) -> dict | None:
        """{tensor: (lowest, highest)} as onnxruntime's MinMax calibration finds them,
        or None where this run cannot stand for it: a tensor empty on every feed, a NaN
        (onnxruntime's own rules for those apply), a float16 tensor."""
        if not self.float32 or any(not s.lows or np.isnan([*s.lows, *s.highs]).any()
                                   for s in self.stats.values()):
            return None
        return {name: (min(s.lows), max(s.highs)) for name, s in self.stats.items()}

    def layer_pass(self, float_model, qdq, feeds: list[dict], threads: int | None = None, *,
                   hessians: bool = False, outputs: bool = False) -> LayerPass:
        """layer_pass over `feeds`, the chosen feeds of this run, from what it took:
        only the inputs the QDQ model quantizes are read, for their quantized means."""
        inits = {i.name: i for i in qdq.graph.initializer}
        pairs, skipped = matched_layers(float_model, qdq, inits)
        plain = [self.plain[twin.input[0]] for _, twin in pairs]
        seen = LayerPass(pairs, skipped, plain, [0.0] * len(pairs),
                         [self.hessians.get(twin.output[0]) if hessians else None
                          for _, twin in pairs], self.outputs if outputs else None)
        _quantized_means(seen, float_model, feeds, threads)
        return seen


@dataclass
class LayerPass:
    """What one pass of the float model gives every matched layer: its input mean per
    channel, plain and as its QuantizeLinear sees it, and (when asked) the second
    moments weight rounding needs (hessian.Hessian); the float outputs when asked."""
    pairs: list             # [(Layer of the QDQ model, its float node)]
    skipped: int            # quantized Conv/Gemm left out
    plain: list
    quantized: list
    hessians: list          # hessian.Hessian | None per pair (all None when not asked)
    outputs: list | None    # per feed, the float model's outputs (run_feeds' layout)
    # per pair, the first pair with the same float input and input quantization: its
    # means serve both (a tensor several layers read is reduced once per feed)
    first: list = field(init=False)

    def __post_init__(self) -> None:
        def key(layer: Layer, twin) -> tuple:
            q = layer.input_q
            return twin.input[0], None if q is None else (q[0].item(), q[1].item(),
                                                          q[1].dtype.str)
        firsts: dict = {}
        self.first = [firsts.setdefault(key(*pair), i) for i, pair in enumerate(self.pairs)]

    def take(self, i: int, x: np.ndarray, feeds: int, taken: dict, plain: bool = True) -> None:
        """Add pair i's input `x` of one of `feeds` feeds; `taken` holds this feed's
        means by the pair that first took them. `plain=False`: the quantized mean only
        (the plain one and H came from the calibrating run)."""
        layer, first = self.pairs[i][0], self.first[i]
        if first not in taken:
            mean = _channel_mean(x) if plain else None
            taken[first] = mean, (_quantized_mean(x, *layer.input_q) if layer.input_q else mean)
        mean, mean_q = taken[first]
        self.quantized[i] = self.quantized[i] + mean_q / feeds
        if plain:
            self.plain[i] = self.plain[i] + mean / feeds
            if self.hessians[i] is not None:
                self.hessians[i].add(x)


def layer_pass(float_model, qdq, feeds: list[dict], threads: int | None = None, *,
               hessians: bool = False, outputs: bool = False) -> LayerPass:
    """One run of the float model over `feeds` with every matched layer's input a graph
    output; one feed's tensors at a time. (After calibrating_pass over the same feeds,
    Calibrated.layer_pass makes the same from what that run took.)"""
    from compress.quant.float_probe import tensor_values
    from compress.quant.hessian import hessians as accumulators

    inits = {i.name: i for i in qdq.graph.initializer}
    pairs, skipped = matched_layers(float_model, qdq, inits)
    layers = float_layers(float_model)
    seeds = {n.output[0]: k for k, n in enumerate(layers)}
    held = (accumulators(float_model, layers, len(feeds)) if hessians
            else [None] * len(layers))
    seen = LayerPass(pairs, skipped, [0.0] * len(pairs), [0.0] * len(pairs),
                     [held[seeds[twin.output[0]]] for _, twin in pairs],
                     [] if outputs else None)
    inputs = [twin.input[0] for _, twin in pairs]
    names = [o.name for o in float_model.graph.output] if outputs else []
    for values in tensor_values(float_model, [*inputs, *names], feeds, threads):
        if outputs:
            seen.outputs.append([values[name] for name in names])
        taken = {}
        for i, name in enumerate(inputs):
            seen.take(i, values[name], len(feeds), taken)
    return seen


def _quantized_means(seen: LayerPass, float_model, feeds: list[dict], threads) -> None:
    """The quantized input means of `seen`'s layers that have an input quantization; the
    others' are their plain means."""
    from compress.quant.float_probe import tensor_values
    read = [i for i, (layer, _) in enumerate(seen.pairs) if layer.input_q is not None]
    for i in set(range(len(seen.pairs))) - set(read):
        seen.quantized[i] = seen.plain[i]
    if not read:
        return
    names = [seen.pairs[i][1].input[0] for i in read]
    for values in tensor_values(float_model, names, feeds, threads):
        taken = {}
        for i, name in zip(read, names):
            seen.take(i, values[name], len(feeds), taken, plain=False)


def calibrating_pass(float_model, feeds: list[dict], chosen: Chosen,
                     threads: int | None = None, *, advance=None, channels=()) -> Calibrated:
    """One run of the float model over all `feeds` with every tensor quantize_static
    calibrates a graph output: each one's lowest and highest value per feed, and per
    channel (axis 1) for the tensors named in `channels` (hard-swish equalization's);
    and on the `chosen` feeds, every float layer's input mean and (as asked) H and the
    outputs, as layer_pass would take them from those feeds."""
    from compress.quant.float_probe import tensor_values
    from compress.quant.hessian import hessians as accumulators
    from compress.quant.ranges import TensorStats, calibrated_tensors

    layers = float_layers(float_model)
    held = (accumulators(float_model, layers, len(chosen.indices)) if chosen.hessians
            else [None] * len(layers))
    names = calibrated_tensors(float_model)
    stats = {name: TensorStats() for name in names}
    ends = [o.name for o in float_model.graph.output] if chosen.outputs else []
    inputs = list(dict.fromkeys(n.input[0] for n in layers))
    found = Calibrated(stats, {}, {n.output[0]: h for n, h in zip(layers, held)},
                       [] if chosen.outputs else None, chosen=list(chosen.indices))
    picked = set(chosen.indices)
    # unoptimized as onnxruntime's calibrator runs it: the same ranges to the bit, so
    # the same quantized file as quantize_static calibrating for itself
    for k, values in enumerate(tensor_values(float_model, [*names, *inputs, *ends, *channels],
                                             feeds, threads, unoptimized=True)):
        for name in names:
            stats[name].add(values[name], 0)
            found.float32 = found.float32 and values[name].dtype == np.float32
        for name in channels:
            add_channel_range(found.channels, name, values[name])
        if k in picked:
            _take_chosen(found, layers, held, values, ends, len(chosen.indices))
        if advance is not None:
            advance(1)
    return found


def add_channel_range(ranges: dict, name: str, value: np.ndarray) -> None:
    """Widen ranges[name], (per-channel lowest, per-channel highest), to take `value`
    (channels on axis 1)."""
    axes = tuple(i for i in range(value.ndim) if i != 1)
    low, high = value.min(axis=axes), value.max(axis=axes)
    if name in ranges:
        low, high = np.minimum(ranges[name][0], low), np.maximum(ranges[name][1], high)
    ranges[name] = (low, high)


def _take_chosen(found: Calibrated, layers: list, held: list, values: dict, ends: list,
                 count: int) -> None:
    """One chosen feed's plain means, H rows and outputs, in layer_pass's order."""
    if found.outputs is not None:
        found.outputs.append([values[name] for name in ends])
    means = {}
    for node, hessian in zip(layers, held):
        x = values[node.input[0]]
        if node.input[0] not in means:
            means[node.input[0]] = _channel_mean(x)
            found.plain[node.input[0]] = found.plain.get(node.input[0], 0.0) \
                + means[node.input[0]] / count
        if hessian is not None:
            hessian.add(x)
