"""The pipeline's targets resolved once per run or search: each target's name and its
profile (read once, with the target's own threads and engines), which targets are gated,
and the stages' settings that the profiles supply."""
from __future__ import annotations

from dataclasses import dataclass

from compress.errors import ConfigError
from compress.stagebase import STAGES
from profiles.validation import field_of
from profiles import Profile, ProfileError, load_profile


@dataclass(frozen=True)
class Targets:
    """What the runner, the search and the report know of the targets. `pairs`:
    [(target name, Profile)] in the pipeline's order, each profile with its target's own
    threads and engines; `loaded`: each profile as its file says, so a search's variant
    takes its own threads and engines without the files being read again."""
    pairs: tuple[tuple[str, Profile], ...]
    gated: frozenset[str]
    loaded: tuple[Profile, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.pairs)

    def for_variant(self, pipeline) -> "Targets":
        """The targets of a variant of the pipeline they were resolved for (a search's
        trial: the same targets, its own threads or engines), checked as the pipeline's."""
        return _resolve(pipeline, self.loaded)


def resolve_targets(pipeline) -> Targets:
    """Each target's profile, read and checked (a ConfigError names the target)."""
    return _resolve(pipeline, None)


def _load(pipeline, index: int) -> Profile:
    try:
        return load_profile(pipeline.targets[index].profile, base_dir=str(pipeline.base_dir))
    except ProfileError as exc:
        raise ConfigError(str(exc), field=field_of(("targets", index))) from None


def _resolve(pipeline, loaded: tuple | None) -> Targets:
    """The targets, from their profiles as `loaded` (None: read each from its file)."""
    pairs, gated, profiles = [], set(), []
    for index, target in enumerate(pipeline.targets):
        profile = _load(pipeline, index) if loaded is None else loaded[index]
        profiles.append(profile)
        if target.runtime_overrides():
            profile = _with_runtime(profile, target.runtime_overrides(), index)
        name = target.name or profile.name
        if name in dict(pairs):
            raise ConfigError(f"target '{name}' is listed twice; give one of them its own "
                              "`name:`", field=field_of(("targets", index)))
        pairs.append((name, profile))
        if target.gate:
            gated.add(name)
    return Targets(tuple(pairs), frozenset(gated), tuple(profiles))


def _with_runtime(profile, overrides: dict, index: int):
    """The profile with a target's own threads or engines (checked as the profile's)."""
    from pydantic import ValidationError
    from profiles.validation import message_of
    try:
        runtime = type(profile.runtime).model_validate(
            {**profile.runtime.model_dump(), **overrides})
    except ValidationError as exc:
        error = exc.errors()[0]
        raise ConfigError(message_of(error, type(profile.runtime)),
                          field=field_of(("targets", index, error["loc"][0]))) from None
    return profile.model_copy(update={"runtime": runtime})


def apply_target_defaults(pipeline, targets) -> object:
    """The pipeline with each stage's unset settings taken from the target profiles
    (`targets`: [(name, Profile)], as Targets.pairs)."""
    stages = []
    for index, stage in enumerate(pipeline.stages):
        try:
            stages.append(stage.for_targets(targets))
        except ValueError as exc:
            raise ConfigError(str(exc), field=field_of(("stages", index, stage.type),
                                                       STAGES)) from None
    return pipeline.model_copy(update={"stages": tuple(stages)})
