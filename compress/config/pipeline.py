"""pipeline.yaml as pydantic models: validation, JSON Schema, and the Python API.

Every model is frozen and forbids unknown keys. Relative paths are resolved against the
directory of the YAML file (or the working directory for pipelines built in Python).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional, Union

from pydantic import (AfterValidator, Field, PrivateAttr, ValidationError, field_validator,
                      model_validator)
from pydantic_core import PydanticCustomError

from compress import stages as _stages  # noqa: F401  (registers every stage type)
from compress.config.data import (DATA_ROLES, DataSource, DataSpec, Metric,  # noqa: F401
                                  TextData)
from compress.model.spec import (CALLABLE_NAME, DTYPES, ModelSpec, TensorDecl,  # noqa: F401
                                   TorchSource)
from compress.config.executor import EXECUTOR_TYPES, Executor, LocalExecutor
from compress.config.search import SearchSpec
from compress.config.targets import TargetSpec
from compress.config.tracking import TrackingSpec
from compress.errors import ConfigError
from compress.quant.schemes import SCHEMES, scheme_of_setting
from compress.config.stage_graph import GraphProblem, check_graph
from compress.stagebase import STAGES, Strict
from compress.config.yamlsource import line_for, load_yaml_with_lines
from profiles.validation import clean_location, field_of, first_per_field, message_of
from runtimes import formats
from runtimes.suggest import IN_BETWEEN, did_you_mean


def _stage_union():
    members = tuple(spec.config_cls for spec in STAGES.values())
    return Annotated[Union[members], Field(discriminator="type")]


Stage = _stage_union()


def _folder_name(name: str) -> str:
    # it names a folder under `output`: it must stay inside it and fit a file system
    if name in (".", "..") or len(name.encode()) > 200:
        raise ValueError("the name names the run directory: not '.' or '..', at most "
                         "200 characters")
    return name


# A run's name, from the YAML or from `--name`: one folder under the output folder.
RunName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$"), AfterValidator(_folder_name)]


class ShipSpec(Strict):
    """`ship:`: where every gated target's recommended file goes after the run."""

    to: str = Field(min_length=1, description="the folder (relative to the pipeline file's "
                    "folder) that gets <target>/ with the recommended file and ship.json")


class Pipeline(Strict):
    """A whole pipeline: the YAML file's document, or the same built in Python."""

    name: RunName = Field(description="names the run directory")
    model: ModelSpec = Field(description="the model as you have it, and its inputs")
    data: DataSpec = Field(DataSpec(), description="calibration, evaluation and training "
                           "data, and the metric")
    stages: tuple[Stage, ...] = Field(min_length=1, description="what is done to the model, "
                                      "in order; benchmark last")
    targets: tuple[TargetSpec, ...] = Field((), description="device profiles to measure and "
                                            "check against")
    output: str = Field("runs", description="parent of the run directory runs/<name>/")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed for anything random (data "
                      "shuffles, training); 0 to 4294967295")
    search: Optional[SearchSpec] = Field(None, description="stage options as lists of "
                                         "choices: the variants to try and recommend from")
    tracking: Optional[TrackingSpec] = Field(None, description="log runs to MLflow")
    executor: Executor = Field(LocalExecutor(), description="where a search's trials "
                               "compress: local (here, one after another) or ray (a cluster)")
    ship: Optional[ShipSpec] = Field(None, description="copy each gated target's "
                                     "recommended file, with ship.json, to a folder")

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)

    @field_validator("stages")
    @classmethod
    def _benchmark_last(cls, stages):
        for index, stage in enumerate(stages[:-1]):
            if not STAGES[stage.type].produces_artifacts:
                raise ValueError(f"stage {index + 1} ({stage.type}) must be the last stage")
        return stages

    @model_validator(mode="after")
    def _inputs_refer_to_earlier_stages(self):
        known = {"source"}
        for index, (stage, name) in enumerate(zip(self.stages, self.stage_names())):
            if stage.input is not None and stage.input not in known:
                raise PydanticCustomError(
                    "stage_reference", "stage {number} ({type}) takes input '{input}', which "
                    "is not an earlier stage; earlier stages: {known}",
                    {"index": index, "key": "input", "number": index + 1, "type": stage.type,
                     "input": stage.input, "known": ", ".join(sorted(known))})
            if name in known:
                raise PydanticCustomError(
                    "stage_reference", "two stages are named '{name}'",
                    {"index": index, "key": "name", "name": name})
            known.add(name)
        return self

    @model_validator(mode="after")
    def _data_fits_model(self):
        language, given = self.model.language, self.model.format
        tensors = [role for role in DATA_ROLES if getattr(self.data, role) is not None]
        if language and (tensors or self.data.metric):
            raise ValueError(f"a {given} is calibrated and evaluated on data.text, not "
                             f"data.{(tensors or ['metric'])[0]}: remove it")
        if language and self.data.text is None:
            raise ValueError(f"a {given} needs data.text: `text: {{python_docs: true}}`, "
                             "`text: {file: corpus.txt}` or `text: {loader: module:function}`")
        if self.data.text is not None and not language:
            sources = ", ".join(f"model.{n}" for n in formats.names(formats.LANGUAGE, given=True))
            raise ValueError(f"data.text is for a causal language model ({sources})")
        return self

    @model_validator(mode="after")
    def _stages_connect(self):
        try:
            check_graph(self)
        except GraphProblem as problem:
            raise PydanticCustomError("stage_reference", "{message}", {
                "index": problem.index, "key": problem.key, "message": problem.message}) from None
        return self

    @model_validator(mode="after")
    def _language_model_exported(self):
        # after the graph check: a stage given the wrong format says so first
        exports = [formats.get(n).made_by for n in formats.names(
            made_from=self.model.format, baseline=True)]
        if self.model.language and not any(stage.type in exports for stage in self.stages):
            raise ValueError(f"a {self.model.format} is measured against its float export: add "
                             f"`- type: {exports[0]}` (or {', '.join(exports[1:])}) as the "
                             "first stage")
        return self

    def stage_names(self) -> list[str]:
        return [stage.name or f"{index:02d}-{stage.type}"
                for index, stage in enumerate(self.stages, start=1)]

    @property
    def base_dir(self) -> Path:
        return self._base_dir

    def resolve(self, path: str) -> Path:
        candidate = Path(path).expanduser()
        return candidate if candidate.is_absolute() else self._base_dir / candidate

    @property
    def run_dir(self) -> Path:
        return self.resolve(self.output) / self.name


def _tag_error(error: dict, loc: tuple) -> tuple[tuple, str]:
    """A union's tag missing or unknown: a stage's `type`, or a quantize stage's `scheme`."""
    key = error["ctx"]["discriminator"].strip("'")
    if loc and loc[0] == "executor":
        known, what = sorted(EXECUTOR_TYPES), "executor"
    else:
        known = sorted(STAGES) if key == "type" else sorted(SCHEMES)
        what = "stage type" if key == "type" else "scheme"
    if error["type"] == "union_tag_not_found":
        return (*loc, key), f"required key is missing: give `{key}:`, one of {', '.join(known)}"
    tag = error["ctx"]["tag"]
    return (*loc, key), (f"unknown {what} '{tag}'{did_you_mean(tag, known, IN_BETWEEN)}. "
                         f"Known {what}s: {', '.join(known)}")


def _scheme_parts(loc: tuple) -> tuple[tuple, str | None]:
    """The location without a quantize stage's scheme (pydantic names the union member
    chosen), and that scheme."""
    for index, part in enumerate(loc[:-1]):
        if part == "quantize" and loc[index + 1] in SCHEMES:
            return loc[:index + 1] + loc[index + 2:], loc[index + 1]
    return loc, None


def _format_error(error: dict, file: str | None, lines: dict) -> ConfigError:
    loc, scheme = _scheme_parts(clean_location(error["loc"]))
    message = message_of(error, Pipeline)
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
        loc, message = _tag_error(error, loc)
    elif error["type"] == "extra_forbidden" and scheme and scheme_of_setting(str(loc[-1])):
        *others, last = scheme_of_setting(str(loc[-1]))
        message = (f"a setting of {', '.join(others) + ' or ' if others else ''}{last}, not of "
                   f"{scheme}: remove it (or change the scheme)")
    elif error["type"] == "string_pattern_mismatch" and \
            error["ctx"]["pattern"] == CALLABLE_NAME:
        message = (f"{error['input']!r} is not `module:function`: the module beside the "
                   "pipeline file (or on PYTHONPATH), a colon, then the name in it "
                   "(e.g. model:build)")
    elif error["type"] == "stage_reference":  # raised on the whole pipeline: point at the stage
        loc = ("stages", error["ctx"]["index"], error["ctx"]["key"])
    return ConfigError(message, file=file, line=line_for(loc, lines),
                       field=field_of(loc, STAGES))


def parse_pipeline(data: object, *, file: str | None = None, lines: dict | None = None,
                   base_dir: Path | None = None) -> Pipeline:
    """Validate a pipeline document: one read from a YAML `file`, or (without one) built
    in Python, where objects may stand where the YAML names things."""
    if not isinstance(data, dict):
        raise ConfigError("a pipeline must be a YAML mapping with name, model and stages",
                          file=file, line=1)
    try:
        pipeline = Pipeline.model_validate(data, context={"yaml": file is not None})
    except ValidationError as exc:
        errors = exc.errors()
        # An invalid stage also empties `stages`; "too short" would only repeat the cause.
        errors = first_per_field([e for e in errors if e["type"] != "too_short"] or errors)
        first = _format_error(errors[0], file, lines or {})
        if len(errors) > 1:
            more = "; ".join(str(_format_error(e, None, lines or {})) for e in errors[1:4])
            raise ConfigError(f"{first} (and {len(errors) - 1} more: {more})") from None
        raise first from None
    if base_dir is not None:
        pipeline._base_dir = Path(base_dir).resolve()
    return pipeline


def load_pipeline(path: str | Path) -> Pipeline:
    """Read and validate a pipeline YAML; errors name the file, line and field."""
    data, lines = load_yaml_with_lines(path)
    return parse_pipeline(data, file=str(path), lines=lines, base_dir=Path(path).parent)
