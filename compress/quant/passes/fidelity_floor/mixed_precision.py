"""Mixed precision, measured: which activation groups of a QDQ model (qdq_groups.py) cost
its outputs the most, and the recovery int8-static's fidelity floor runs
(onnx.py, `recover`): one group at a time, costliest first, 16 bits (float
where 16 bits were not enough), re-scored after each, until the floor holds; then each
move taken back where the floor holds without it.

A group's cost is measured at the outputs: the float model with that one tensor
quantized as the QDQ model quantizes it (qdq_groups.alone), its output SQNR against the
float model (the worst output) on a few of the check's feeds: one run per group and
feed, no quantized model. The cheaper per-layer measures read the tensor itself, and on
the test's model (a stem conv whose output channels span 0.08..45 into a depthwise conv,
tests/compress/quant/test_recovery.py) both miss the cause: the stem output quantized
alone keeps 37.7 dB of its own signal (the tensor's SQNR, as NNCF's and AIMET's per-layer
reports read it), and in the quantized model the first tensor far from its float twin
is the depthwise conv's output (2.0 dB against 37.1 before it), where widening does
nothing; quantized alone, the stem output leaves the logits at 1.8 dB and every other
group at 38 dB or more, and widening it lifts the model from 1.9 to 33.6 dB.

Where the kept model's biases were corrected for their inputs' quantization (fast bias
correction: W_q E[Q(x)] - W E[x] taken off), changing a group's quantization changes
E[Q(x)]: the layers that read it have their correction moved onto the new input
(`Means`), or the 16-bit group would undo what the correction did (on the test's model,
widening the stem output of the corrected model moved it from 4.8 to 4.6 dB)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from compress.quant import qdq_groups
from compress.quant.qdq_groups import Group

EIGHT_BIT, SIXTEEN_BIT, FLOAT = "8-bit", "16-bit", "float"
# onnxruntime's messages run to the whole graph's listing; the first line names the node
# and the tensor, which is what a record needs
REASON_CHARS = 600


def float_outputs(float_model, feeds: list[dict], threads: int) -> list:
    from compress.quant.float_probe import session
    run = session(float_model, threads)
    return [run.run(None, feed) for feed in feeds]


def sqnr(model, feeds: list[dict], reference: list, threads: int | None = None) -> float:
    """`model`'s output SQNR (dB, the worst output) against `reference` on `feeds`."""
    from compress.quant.float_probe import session
    from runtimes.metrics import feed_fidelity
    run = session(model, threads or os.cpu_count() or 1)
    return round(feed_fidelity([run.run(None, f) for f in feeds], reference)["sqnr_db"], 2)


def float_names(float_model, unlike=()) -> set:
    """The float model's tensors that hold what the QDQ model's tensors of the same name
    hold: all but `unlike` (those hard-swish equalization scaled per channel there)."""
    names = {o for n in float_model.graph.node for o in n.output}
    return (names | {i.name for i in float_model.graph.input}) - set(unlike)


def ranked(float_model, qdq, feeds: list[dict], reference: list,
           names: set) -> list[tuple[Group, Optional[float]]]:
    """The activation groups of `qdq` with their cost (the outputs' SQNR with it alone
    quantized), costliest first; a group without a float twin among `names`
    (float_names) last, its cost None."""
    costs = []
    for group in qdq_groups.groups(qdq):
        name = group.float_name(names)
        alone = (None if name is None else
                 qdq_groups.alone(float_model, name, *qdq_groups.pair(qdq, group.key)))
        costs.append((group, None if alone is None else _scored(alone, feeds, reference)))
    return sorted(costs, key=lambda c: np.inf if c[1] is None else c[1])


def _scored(model, feeds: list[dict], reference: list) -> Optional[float]:
    """sqnr(...), or None where onnxruntime refuses the model (a pair on a tensor of a
    type it does not quantize, an op without a kernel for it): that group is tried last."""
    try:
        return sqnr(model, feeds, reference)
    except Exception:  # noqa: BLE001 - onnxruntime's errors have no common base class
        return None


@dataclass
class Means:
    """Per group (by key), the per-channel mean of its float tensor over the feeds the
    bias correction was fitted on: as its pair quantizes it now ("8-bit"), at 16 bits,
    and clipped to its range (float)."""
    by_key: dict = field(default_factory=dict)

    @staticmethod
    def of(float_model, qdq, groups: list[Group], feeds: list[dict], names: set) -> "Means":
        """Over `feeds`, for the `groups` with a float twin among `names`."""
        from compress.quant.float_pass import _channel_mean, _quantized_mean
        from compress.quant.float_probe import tensor_values
        read = {g.key: g.float_name(names) for g in groups if g.float_name(names)}
        pairs = {key: qdq_groups.pair(qdq, key) for key in read}
        means = Means({key: {EIGHT_BIT: 0.0, SIXTEEN_BIT: 0.0, FLOAT: 0.0} for key in read})
        for values in tensor_values(float_model, list(set(read.values())), feeds):
            for key, name in read.items():
                x, (scale, zero) = values[name], pairs[key]
                wide = qdq_groups.sixteen_bit(scale, zero)[:2] if zero.dtype.itemsize == 1 \
                    else (scale, zero)
                found = means.by_key[key]
                found[EIGHT_BIT] = found[EIGHT_BIT] + _quantized_mean(x, scale, zero) / len(feeds)
                found[SIXTEEN_BIT] = found[SIXTEEN_BIT] + _quantized_mean(x, *wide) / len(feeds)
                low, high = qdq_groups.span(scale, zero)
                found[FLOAT] = found[FLOAT] + _channel_mean(np.clip(x, low, high)) / len(feeds)
        return means


def _recorrect(model, float_model, reads: set, moved: tuple) -> None:
    """The bias of each corrected Conv / Gemm reading `reads`, moved by its response to
    the input mean's move (old, new): bias + W_q (E[old] - E[new])."""
    from compress.quant.passes.fast_correction.onnx import _response, _shift_bias
    from compress.quant.layer_pairs import matched_layers
    inits = {i.name: i for i in model.graph.initializer}
    pairs, _ = matched_layers(float_model, model, inits)
    for layer, _twin in pairs:
        if layer.node.input[0] in reads:
            _shift_bias(layer, _response(layer.node, layer.weight_q, moved[1] - moved[0]), inits)


def assigned(kept: bytes, levels: dict, float_model, means: Optional[Means]) -> bytes:
    """The model `kept` with each group of `levels` ({Group: 16-bit or float}) at its
    precision (16-bit where the group is an 8-bit one) and, where `means` are given (its
    biases were corrected), the correction of the layers reading it moved onto the new
    input. Made from the kept model each time: a group taken back is as it was."""
    import onnx
    model = onnx.load_model_from_string(kept)
    for group, level in levels.items():
        reads = {n.output[0] for n in model.graph.node
                 if n.op_type == "DequantizeLinear" and n.input[0] == group.key}
        if level != SIXTEEN_BIT or not qdq_groups.widen(model, group.key):
            level = FLOAT
            qdq_groups.bypass(model, [group.key])
        found = means.by_key.get(group.key) if means is not None else None
        if found is not None:
            _recorrect(model, float_model, reads, (found[EIGHT_BIT], found[level]))
    qdq_groups.drop_unused(model)
    return model.SerializeToString()


@dataclass(frozen=True)
class Step:
    """One group moved to precision `to` (16-bit, float, or back to 16-bit or 8-bit):
    its cost alone, the score before and after, and whether the move was kept."""
    group: Group
    alone_db: Optional[float]
    to: str
    before_db: float
    after_db: Optional[float]   # None: the move's model could not be made or scored
    kept: bool
    reason: Optional[str] = None   # why, where after_db is None

    def record(self) -> dict:
        found = {"layer": self.group.words(), "tensor": self.group.tensor,
                 "node": self.group.producer, "op": self.group.op,
                 "alone_sqnr_db": self.alone_db, "to": self.to,
                 "sqnr_db_before": self.before_db, "sqnr_db_after": self.after_db,
                 "kept": self.kept}
        return {**found, "reason": self.reason} if self.reason else found


def failure(error: Exception) -> str:
    """An exception in one line for a record: its type and the first line of its message
    (onnxruntime's names the node, and the tensor it found nowhere)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:REASON_CHARS]


@dataclass(frozen=True)
class Greedy:
    """What the recovery aims at: the floor, what undoing a step may cost where the floor
    is out of reach, the most groups it gives more bits."""
    floor_db: float
    min_gain_db: float
    max_steps: int


@dataclass
class Search:
    """The recovery as it goes: the precision of each group moved ({Group: level}, in the
    order they were moved), the model they make and its score, every step."""
    build: Callable       # levels -> model bytes
    score: Callable       # model bytes -> dB
    model: bytes
    now: float
    costs: dict           # {Group: its cost alone}
    levels: dict = field(default_factory=dict)
    steps: list = field(default_factory=list)

    def move(self, group: Group, to: str, keep: Callable[[float], bool]) -> bool:
        """Move `group` to precision `to`, kept where `keep(score after)`."""
        levels = {g: level for g, level in {**self.levels, group: to}.items()
                  if level != EIGHT_BIT}
        model, after, reason = None, None, None
        try:
            model = self.build(levels)
            after = self.score(model)
        except Exception as error:  # noqa: BLE001 - onnxruntime's errors share no base class
            reason = failure(error)   # not made, and the record says why
        kept = after is not None and keep(after)
        self.steps.append(Step(group, self.costs.get(group), to, self.now, after, kept, reason))
        if kept:
            self.levels, self.model, self.now = levels, model, after
        return kept


def _more_bits(group: Group) -> str:
    return SIXTEEN_BIT if group.bits == 8 else FLOAT


def recover(start: tuple[bytes, float], costs: list, build: Callable, score: Callable,
            aim: Greedy) -> Search:
    """From `start` (the kept model, its score): the groups of `costs` (costliest first)
    given more bits one at a time, each move kept, re-scored after each, until the floor
    holds or `aim.max_steps` groups were moved: several groups can each hold the outputs
    down (a power spectrum's two halves), so one move alone may gain nothing. Where
    16 bits were not enough, those groups float, one at a time. Then every move is taken
    back, least costly group first, where the floor holds without it (where it was not
    reached: from the best state the moves passed, since a move can lower the score,
    where the score stays within `aim.min_gain_db` of it)."""
    search = Search(build, score, *start, dict(costs))
    best = [dict(search.levels), search.model, search.now]

    def forward(group, level) -> bool:
        """One move kept whatever it scores; False once the floor holds."""
        if search.now >= aim.floor_db:
            return False
        search.move(group, level, lambda db: True)
        if search.now > best[2]:
            best[:] = [dict(search.levels), search.model, search.now]
        return True
    all(forward(group, _more_bits(group)) for group, _ in costs[:aim.max_steps])
    all(forward(group, FLOAT) for group in
        [g for g, level in search.levels.items() if level == SIXTEEN_BIT])
    if search.now < aim.floor_db and best[2] > search.now:
        # out of reach: take moves back from the best state passed, not from the last
        search.levels, search.model, search.now = best
    bar = aim.floor_db if search.now >= aim.floor_db else search.now - aim.min_gain_db
    for group in reversed(list(search.levels)):
        lower = ([SIXTEEN_BIT] if search.levels[group] == FLOAT and group.bits == 8 else [])
        for level in (*lower, EIGHT_BIT):
            if not search.move(group, level, lambda db: db >= bar):
                break
    if search.now <= start[1]:   # nothing gained: the kept model as it was
        search.levels, search.model, search.now = {}, start[0], start[1]
    return search
