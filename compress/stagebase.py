"""What every stage config shares, and the registry that maps a `type` tag to a stage.

A stage is a frozen pydantic config with a `type` tag plus one function
`run(input_artifact, config, ctx) -> list of artifacts`. The YAML is the Python API
serialised: `Int8Static(calibration="entropy")` and `{type: quantize, scheme: int8-static,
calibration: entropy}` are the same object, and a mistake in either is the same
ConfigError naming the setting.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Optional

from pydantic import BaseModel, Field, ValidationError

from compress.errors import ConfigError
from profiles.validation import Strict, clean_location, field_of, first_per_field, message_of


def settings_error(what: str, exc: ValidationError, model=None) -> ConfigError:
    """A stage's settings refused in Python (`ExportOnnx(opset=3)`): the error the YAML
    gives for them (the setting, then what is wrong with it), with the class named; a
    misspelt setting with the closest of `model`'s."""
    errors = first_per_field(exc.errors())
    # a rule over several settings has no location: its message names them
    found = [(clean_location(e["loc"]), message_of(e, model)) for e in errors]
    said = [f"{field_of(loc)}: {message}" if loc else message for loc, message in found]
    text = f"{what}: {said[0]}"
    if len(said) > 1:
        text += f" (and {len(said) - 1} more: {'; '.join(said[1:4])})"
    error = ConfigError(text)
    error.field = field_of(found[0][0]) if found[0][0] else None
    return error


class _CheckedInPython(type(BaseModel)):
    """Builds a stage config called from Python, `ExportOnnx(opset=17)`, turning pydantic's
    ValidationError into settings_error's ConfigError. A pipeline's own validation (a
    stage given as a dict) never calls the class, so it keeps its own messages (the
    stage's place in the file) and its validation context."""

    def __call__(cls, /, *args, **settings):
        if args:
            raise ConfigError(f"{cls.__name__} takes its settings by name "
                              f"({cls.__name__}(setting=value, ...)), not {len(args)} "
                              "positional value(s)")
        try:
            return super().__call__(**settings)
        except ValidationError as exc:
            raise settings_error(cls.__name__, exc, cls) from None


class StageConfig(Strict, metaclass=_CheckedInPython):
    # Raised when a stage's code changes what it produces, so cached artifacts made by
    # the older code are not reused (the cache key holds it).
    cache_version: ClassVar[int] = 1

    name: Optional[str] = Field(
        None, pattern=r"^[A-Za-z0-9_.-]+$",
        description="a name later stages can use as `input` (default: NN-type)")
    input: Optional[str] = Field(
        None, description="name of an earlier stage whose artifact this stage takes, or "
        "'source' for the model as given (default: the previous stage's artifact)")

    def required_data(self) -> tuple[str, ...]:
        """Data sections this stage cannot run without (checked before anything runs)."""
        return ()

    def for_targets(self, targets: list) -> "StageConfig":
        """This stage with the defaults the pipeline's target profiles supply for settings
        the pipeline left unset ([(name, Profile)]; e.g. rpi4 asks TFLite for int8).
        Raises ValueError when the targets disagree."""
        return self

    def formats(self) -> dict[str, str]:
        """{input format: output format} for the model formats (torch, onnx, tflite) this
        stage takes; the stage graph is checked against it before any work."""
        return {}

    def format_hint(self, given: str) -> str:
        """How to give this stage a model it takes, when it was given `given`."""
        return ""

    def baseline_settings(self) -> dict:
        """An export stage's settings for the source's float model in its format (the
        baseline, compress/runner/baselines.py): its own, less what would quantize it."""
        return self.model_dump(exclude={"name", "input"})

    def external_inputs(self) -> dict[str, object]:
        """{setting: checkpoint path or `module:callable` factory} this stage reads besides
        its input artifact; their contents (not their names) go into the stage's cache key."""
        return {}


@dataclass(frozen=True)
class StageSpec:
    tag: str
    config_cls: type
    run: Callable
    produces_artifacts: bool = True
    api_class: type | None = None   # what Python builds it with (compress.<Name>)


STAGES: dict[str, StageSpec] = {}


def register(config_cls, produces_artifacts: bool = True, tag: str | None = None,
             api_class: type | None = None):
    """Decorator: `@register(QuantizeConfig)` over the stage's run function; `tag` for a
    stage whose config is a union of classes (quantize: one class per scheme), and then
    `api_class`, the one class Python callers build it with (else `config_cls`: the
    Python API, `compress.<its name>`, reads it from here)."""
    tag = tag or config_cls.model_fields["type"].default

    def decorate(fn: Callable) -> Callable:
        STAGES[tag] = StageSpec(tag, config_cls, fn, produces_artifacts, api_class or config_cls)
        return fn
    return decorate
