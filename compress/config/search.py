"""`search:` of pipeline.yaml: stage options given as lists of choices, how many variants
to try, and how (every combination, or Optuna's multi-objective sampler)."""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from compress.stagebase import Strict

# What a choice may be: what YAML writes for a stage option (a list or mapping too, e.g.
# a preset's settings); Optuna sees the index of a choice that is not a plain scalar.
Choice = Union[None, bool, int, float, str, list, dict]


class SearchSpec(Strict):
    space: dict[str, tuple[Choice, ...]] = Field(
        min_length=1, description="`<stage>.<option>: [choices]`, the stage by its name "
        "(or NN-type, or its type where only one stage has it), e.g. `quantize.scheme: "
        "[int8-static, fp16]`; `<stage>: [true, false]` runs the variants with and without "
        "that stage")
    strategy: Literal["auto", "exhaustive", "optuna"] = Field(
        "auto", description="exhaustive: every combination; optuna: a multi-objective "
        "sampler (latency, accuracy drop) with the budgets as constraints, for spaces too "
        "large to try whole; auto: exhaustive when every combination fits max_trials")
    max_trials: Optional[PositiveInt] = Field(
        None, description="variants to try at most (default: every combination when "
        "exhaustive, 20 with optuna)")
    time_budget_s: Optional[PositiveFloat] = Field(
        None, description="start no new trial after this many seconds")

    @field_validator("space")
    @classmethod
    def _choices(cls, space):
        for key, choices in space.items():
            if len(choices) < 1:
                raise ValueError(f"search.space.{key} lists no choice: give one or more")
            if len({repr(c) for c in choices}) != len(choices):
                raise ValueError(f"search.space.{key} lists a choice twice")
        return space
