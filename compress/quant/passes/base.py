"""The one interface of an INT8 pass, and the registry the runner reads.

A pass declares, in an Int8Pass:

    name      how the registry and `after` know it
    when      where in the run it applies (the runner's order, WHEN)
    on        whether the stage's settings run it
    needs     what it takes from the one float pass over the calibration feeds (Needs)
    fitted    fitted on the feeds the check scores it on: a fitted candidate must beat
              one that is not by the format's margin
    checked   whether the settings leave it to the check (else it is applied as asked)
    streams   whether it can run on the tensor-by-tensor path (compress/quant/streamed/backends.py)
    asked     the words naming the setting that asks for it on purpose: the streamed path,
              which cannot make it, then gives way to the in-memory quantizer
    after     the passes it must follow within its step
    backends  per format ("onnx", "tflite"), the object that does it there
    label     its part of the name of a check candidate it is in

What a backend offers depends on `when` (the format backend's run calls it: runner.py,
onnx_backend.py, tflite_backend.py):
    FLOAT_MODEL  rewrite(run) -> (new float model, meta): made before quantizing
    RANGES       ranges(run, cache) -> meta: activation ranges written to the cache file
    LAYERS       title(settings) -> str, apply(candidate) -> meta: a change of the
                 quantized layers from the float pass's layer statistics
    GRAPH        apply(run) -> meta | None: a change of the quantized model as kept
and, where the run files what it returns under a key of the artifact's meta, `record`.
"""
from __future__ import annotations

from dataclasses import astuple, dataclass, field
from typing import Callable, Mapping, Optional

FLOAT_MODEL = "on the float model"       # before quantizing
RANGES = "on the ranges"                 # the activation ranges the quantizer reads
LAYERS = "on the quantized layers"       # from the float pass's layer statistics
GRAPH = "on the quantized graph"         # the model the check kept
WHEN = (FLOAT_MODEL, RANGES, LAYERS, GRAPH)


@dataclass(frozen=True)
class Needs:
    """What the one float pass over the calibration feeds takes for the passes."""
    layers: bool = False     # each quantized Conv/Gemm's input mean, plain and as quantized
    hessians: bool = False   # H = E[x x^T] of those inputs (GPTQ)
    outputs: bool = False    # the float model's outputs, which the check scores against
    channels: bool = False   # per-channel ranges of the tensors a pass names (hard-swish)

    def __or__(self, other: "Needs") -> "Needs":
        return Needs(*(a or b for a, b in zip(astuple(self), astuple(other))))


def _nothing(settings) -> Needs:
    return Needs()


def _never(settings) -> bool:
    return False


def _not_asked(settings) -> Optional[str]:
    return None


@dataclass(frozen=True, eq=False)   # one object per pass: it is its own identity
class Int8Pass:
    name: str
    when: str
    on: Callable[[object], bool]
    backends: Mapping[str, object]
    needs: Callable[[object], Needs] = _nothing
    fitted: bool = False
    checked: Callable[[object], bool] = _never
    streams: bool = False
    asked: Callable[[object], Optional[str]] = _not_asked
    after: tuple[str, ...] = field(default=())
    label: str = ""          # its part of a check candidate's name ("gptq", "bias")


PASSES: dict[str, Int8Pass] = {}


def register_pass(new: Int8Pass) -> Int8Pass:
    if new.when not in WHEN:
        raise ValueError(f"pass {new.name}: `when` is one of {WHEN}, not {new.when!r}")
    PASSES[new.name] = new
    return new


def declared_order(passes: list[Int8Pass]) -> list[Int8Pass]:
    """`passes` by WHEN, and within a step each after the ones of that step it names in
    `after` (the others by name, so the order never depends on the import order)."""
    left, done = sorted(passes, key=lambda p: (WHEN.index(p.when), p.name)), []
    while left:
        waiting = {p.name for p in left if p.when == left[0].when}
        ready = next((p for p in left if p.name in waiting and not set(p.after) & waiting), None)
        if ready is None:
            raise ValueError(f"passes {sorted(waiting)} each wait for another (`after`)")
        left.remove(ready)
        done.append(ready)
    return done


def ordered(settings, fmt: str) -> list[Int8Pass]:
    """The passes `settings` run that have a backend for format `fmt`, in declared order."""
    return declared_order([p for p in PASSES.values() if fmt in p.backends and p.on(settings)])


def streaming_refused(settings) -> Optional[str]:
    """The setting asked for on purpose that only the in-memory quantizer makes (the
    first, in declared order), if any."""
    for p in declared_order(list(PASSES.values())):
        reason = None if p.streams else p.asked(settings)
        if reason:
            return reason
    return None
