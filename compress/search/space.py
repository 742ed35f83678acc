"""A search space made concrete: which stage option each `search.space` key names, every
combination of choices, and the pipeline each combination makes (a trial's variant).

A choice a variant cannot take is no error of the space: `quantize.calibration` means
nothing once `quantize.scheme` is fp16, so that variant leaves the setting out, and
variants that come out the same are tried once (their `variant_key` is equal).
"""
from __future__ import annotations

import hashlib
import itertools
import math
import json
from dataclasses import dataclass
from typing import Iterator, Optional

from pydantic import TypeAdapter, ValidationError

from compress.errors import ConfigError
from compress.quant.schemes import scheme_of_setting
from compress.config.stage_graph import GraphProblem, check_graph
from compress.runner.targets import Targets
from compress.stagebase import STAGES


@dataclass(frozen=True)
class Axis:
    key: str                    # as written in search.space
    stage: int                  # index into pipeline.stages (or targets, for a target's)
    option: Optional[str]       # None: the stage itself, on (true) or off (false)
    choices: tuple
    target: bool = False        # `targets.<name>.threads|engines`: a target's setting


TARGET_OPTIONS = ("threads", "engines")   # what a target may change of its profile


def _error(key: str, message: str) -> ConfigError:
    return ConfigError(message, field=f"search.space.{key}")


def with_target(pipeline, index: int, option: str, choice):
    """The pipeline with one target's setting changed (validated as the YAML's is)."""
    targets = list(pipeline.targets)
    target = targets[index]
    targets[index] = type(target).model_validate({**target.model_dump(exclude_unset=True),
                                                  option: choice})
    return pipeline.model_copy(update={"targets": tuple(targets)})


def _target_axis(pipeline, key: str, choices: tuple, targets: Targets) -> Axis:
    names = list(targets.names)
    name, _, option = key[len("targets."):].rpartition(".")
    if name not in names:
        raise _error(key, f"no target is named '{name}'; targets: {', '.join(names)}")
    if option not in TARGET_OPTIONS:
        raise _error(key, f"a target's {' or '.join(TARGET_OPTIONS)} can be searched, not "
                          f"'{option}'")
    for choice in choices:   # each as the target and its profile would take it
        try:
            targets.for_variant(with_target(pipeline, names.index(name), option, choice))
        except ValidationError as exc:
            raise _error(key, f"{choice!r}: {exc.errors()[0]['msg']}") from None
        except ConfigError as exc:
            raise _error(key, f"{choice!r}: {exc}") from None
    return Axis(key, names.index(name), option, choices, target=True)


def _split(pipeline, key: str) -> tuple[int, str]:
    """(the stage a key names, the option after it): the longest stage name or type the
    key starts with, so `export.onnx.opset` is export.onnx's opset."""
    names = pipeline.stage_names()
    refs = set(names) | {stage.type for stage in pipeline.stages}
    matches = [ref for ref in refs if key == ref or key.startswith(ref + ".")]
    if not matches:
        raise _error(key, f"no stage is named or typed '{key.split('.')[0]}'; stages: "
                          f"{', '.join(names)}")
    ref = max(matches, key=len)
    if ref in names:
        return names.index(ref), key[len(ref) + 1:]
    by_type = [i for i, stage in enumerate(pipeline.stages) if stage.type == ref]
    if len(by_type) > 1:
        raise _error(key, f"{len(by_type)} stages have type '{ref}': name them (`name:`) and "
                          f"use the name; stages: {', '.join(names)}")
    return by_type[0], key[len(ref) + 1:]


def _known_option(stage, option: str) -> bool:
    if option in ("type", "name", "input"):
        return False
    return option in type(stage).model_fields or bool(
        stage.type == "quantize" and scheme_of_setting(option))


def _stage_axis(pipeline, key: str, choices: tuple) -> Axis:
    index, option = _split(pipeline, key)
    stage = pipeline.stages[index]
    if option and not _known_option(stage, option):
        raise _error(key, f"'{option}' is not a setting of stage {index + 1} ({stage.type}); "
                          "see `compress schema`")
    if not option and (not STAGES[stage.type].produces_artifacts or
                       any(not isinstance(c, bool) for c in choices)):
        raise _error(key, "a stage alone takes [true, false] (with and without it), and "
                          "never the benchmark")
    for choice in choices if option else ():   # each as the stage would take it
        try:
            _rebuild(stage, {option: choice})
        except ValidationError as exc:
            raise _error(key, f"{choice!r}: {exc.errors()[0]['msg']}") from None
    return Axis(key, index, option or None, choices)


def axes(pipeline, targets: Targets) -> list[Axis]:
    """The space's keys resolved against the pipeline's stages and its targets (resolved
    once: runner.targets), every choice checked as the YAML's settings are (a ConfigError
    names the key and the choice), and an exhaustive search no larger than its cap."""
    found = []
    for key, choices in pipeline.search.space.items():
        if key.startswith("targets."):
            found.append(_target_axis(pipeline, key, tuple(choices), targets))
        else:
            found.append(_stage_axis(pipeline, key, tuple(choices)))
    check_exhaustive(pipeline.search, found)
    return found


# every combination of an exhaustive search is a pipeline run: a search of more without
# max_trials would run for months, a mistake better said before the first trial
EXHAUSTIVE_CAP = 10_000


def size(space_axes: list[Axis]) -> int:
    """How many combinations the space has (duplicates and all)."""
    return math.prod(len(a.choices) for a in space_axes)


def combinations(space_axes: list[Axis]) -> Iterator[dict]:
    """Every combination, in a fixed order: {key: choice}, made one at a time as the
    search asks (a space of a few keys may hold billions)."""
    keys = [a.key for a in space_axes]
    return (dict(zip(keys, picked))
            for picked in itertools.product(*(a.choices for a in space_axes)))


def check_exhaustive(search_spec, space_axes: list[Axis]) -> None:
    """Refuse an exhaustive search (asked for, or `auto` without max_trials) of more
    combinations than EXHAUSTIVE_CAP: every combination is a pipeline run."""
    total = size(space_axes)
    bounded = search_spec.max_trials is not None or search_spec.strategy == "optuna"
    if bounded or total <= EXHAUSTIVE_CAP:
        return
    raise ConfigError(
        f"the space has {total:,} combinations; an exhaustive search tries at most "
        f"{EXHAUSTIVE_CAP:,} (each is a pipeline run): set search.max_trials, or use "
        "search.strategy: optuna (a sampler, 20 trials unless max_trials says otherwise)",
        field="search")


def _rebuild(stage, updates: dict):
    """The stage with these settings. Settings its scheme lacks are left out: the ones
    searched, and, when the search changed the scheme, the ones the pipeline gave for the
    scheme it had (`samples` means nothing to fp16)."""
    adapter = TypeAdapter(type(stage) if stage.type != "quantize" else _stage_union())
    given = stage.model_dump(exclude_unset=True)
    data = {**given, "type": stage.type, **updates}
    droppable = set(updates) | (set(given) if "scheme" in updates else set())
    try:
        return adapter.validate_python(data, context={"yaml": False})
    except ValidationError as exc:
        extra = {e["loc"][-1] for e in exc.errors() if e["type"] == "extra_forbidden"}
        if not extra or not extra <= droppable:
            raise
        data = {k: v for k, v in data.items() if k not in extra}
    return adapter.validate_python(data, context={"yaml": False})


def _stage_union():
    from compress.config.pipeline import Stage
    return Stage


def _settings(space_axes: list[Axis], params: dict) -> tuple[dict[int, dict], set]:
    per_stage: dict[int, dict] = {}
    off = set()
    for axis in space_axes:
        if axis.target:
            continue
        if axis.option is None:
            off |= set() if params[axis.key] else {axis.stage}
        else:
            per_stage.setdefault(axis.stage, {})[axis.option] = params[axis.key]
    return per_stage, off


def _new_names(pipeline, off: set) -> dict:
    """Old stage name -> its name once the stages in `off` are gone (default names are
    numbered by position); a removed stage's name -> what it took as input."""
    names, mapping, position = pipeline.stage_names(), {}, 0
    for index, stage in enumerate(pipeline.stages):
        if index in off:
            mapping[names[index]] = mapping.get(stage.input, stage.input) \
                if stage.input else (mapping.get(names[index - 1]) if index else "source")
            continue
        position += 1
        mapping[names[index]] = stage.name or f"{position:02d}-{stage.type}"
    return mapping


def _references(stage, mapping: dict) -> dict:
    updates = {}
    if stage.input and stage.input != "source":
        updates["input"] = mapping.get(stage.input, stage.input)
    chosen = getattr(stage, "artifacts", None)
    if chosen:
        kept = tuple(mapping[n] for n in chosen if mapping.get(n))
        updates["artifacts"] = kept or None
    return {k: v for k, v in updates.items() if getattr(stage, k) != v}


def variant(pipeline, space_axes: list[Axis], params: dict, **update):
    """(the pipeline this combination makes, None) or (None, why it cannot be made)."""
    per_stage, off = _settings(space_axes, params)
    mapping = _new_names(pipeline, off)
    stages = []
    try:
        for index, stage in enumerate(pipeline.stages):
            if index in off:
                continue
            updates = {**per_stage.get(index, {}), **_references(stage, mapping)}
            stages.append(_rebuild(stage, updates) if updates else stage)
    except ValidationError as exc:
        return None, "; ".join(e["msg"] for e in exc.errors()[:2])
    trial = pipeline
    for axis in (a for a in space_axes if a.target):
        trial = with_target(trial, axis.stage, axis.option, params[axis.key])
    trial = trial.model_copy(update={"stages": tuple(stages), "search": None, **update})
    try:
        check_graph(trial)
    except GraphProblem as problem:
        return None, problem.message
    return trial, None


def variant_key(trial) -> str:
    """Equal for two variants that would run the same stages with the same settings."""
    from pydantic_core import to_jsonable_python
    stages = [s.model_dump(exclude={"name"}) for s in trial.stages]
    targets = [t.model_dump() for t in trial.targets]
    text = json.dumps(to_jsonable_python([stages, targets], fallback=repr), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()
