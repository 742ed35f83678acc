"""pipeline.yaml as pydantic models: validation, JSON Schema, and the Python API.

Every model is frozen and forbids unknown keys. Relative paths are resolved against the
directory of the YAML file (or the working directory for pipelines built in Python).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, PositiveInt, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from compress import stages as _stages  # noqa: F401  (registers every stage type)
from compress.errors import ConfigError
from compress.stagebase import STAGES, Strict
from compress.yamlsource import line_for, load_yaml_with_lines

DTYPES = Literal["float32", "float16", "int64", "int32", "int8", "uint8", "bool"]


class TensorDecl(Strict):
    name: str
    shape: tuple[PositiveInt, ...] = Field(
        description="full shape including the batch dimension, e.g. [1, 3, 224, 224]")
    dtype: DTYPES = "float32"


class TorchSource(Strict):
    factory: str = Field(pattern=r"^[\w.]+:[\w.]+$",
                         description="`module.path:callable` returning a torch.nn.Module")
    checkpoint: Optional[str] = Field(
        None, description="state_dict file, loaded with torch.load(weights_only=True)")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="arguments for the factory")


class ModelSpec(Strict):
    torch: Optional[TorchSource] = None
    onnx: Optional[str] = Field(None, description="path of an ONNX model")
    tflite: Optional[str] = Field(
        None, description="path of a .tflite model, benchmarked as it is (against the "
        "profiles, beside nothing else: no stage but benchmark takes a TFLite model)")
    inputs: tuple[TensorDecl, ...] = Field(min_length=1)
    dynamic_batch: bool = Field(False, description="export with a dynamic batch dimension")

    @model_validator(mode="after")
    def _one_source(self):
        if sum(source is not None for source in (self.torch, self.onnx, self.tflite)) != 1:
            raise ValueError("give exactly one model source: `torch: {factory: ...}`, "
                             "`onnx: PATH` or `tflite: PATH`")
        return self


class DataSource(Strict):
    loader: Optional[str] = Field(None, pattern=r"^[\w.]+:[\w.]+$",
                                  description="`module.path:function` returning numpy arrays")
    kwargs: dict[str, Any] = Field(default_factory=dict)
    npz: Optional[str] = Field(None, description=".npz file, one array per input (+ labels)")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value):
        # `calibration: data.py:load` or `calibration: calib.npz` as a shorthand.
        if isinstance(value, str):
            return {"npz": value} if value.endswith(".npz") else {"loader": value}
        return value

    @model_validator(mode="after")
    def _one_kind(self):
        if (self.loader is None) == (self.npz is None):
            raise ValueError("give exactly one of `loader: module:function` or `npz: PATH`")
        return self


class Metric(Strict):
    type: Literal["accuracy", "fidelity"] = Field(
        description="accuracy: top-1 against labels; fidelity: agreement with the original "
        "model's outputs (top-1 agreement, cosine, max abs error)")
    primary: Literal["top1_agreement", "cosine", "pair_spearman"] = Field(
        "top1_agreement", description="for fidelity: the number budgets are checked on")
    pairs: bool = Field(
        False, description="for fidelity: rows 2i and 2i+1 of the evaluation data are pairs "
        "(e.g. sentences); also report pair_spearman, the Spearman correlation of the "
        "pairs' cosine similarities with the original model's")

    @model_validator(mode="after")
    def _spearman_needs_pairs(self):
        if self.primary == "pair_spearman" and not self.pairs:
            raise ValueError("primary: pair_spearman needs `pairs: true` (rows 2i and 2i+1 "
                             "of the evaluation data form pair i)")
        if (self.pairs or self.primary != "top1_agreement") and self.type != "fidelity":
            raise ValueError("primary and pairs apply to `type: fidelity`")
        return self


class DataSpec(Strict):
    calibration: Optional[DataSource] = None
    evaluation: Optional[DataSource] = None
    train: Optional[DataSource] = Field(
        None, description="training data for fine-tuning and distillation (labels optional)")
    metric: Optional[Metric] = Field(
        None, description="default: accuracy when the evaluation data has labels, else fidelity")


class TargetSpec(Strict):
    profile: str = Field(description="a profile name (`compress profiles`) or a YAML path")
    gate: bool = Field(True, description="whether this target's verdicts decide the exit code")
    name: Optional[str] = Field(
        None, pattern=r"^[A-Za-z0-9_.@-]+$",
        description="what the report calls this target (default: the profile's name); "
        "needed to list one profile twice, e.g. a board over SSH and the host")
    # A device reached over SSH: the benchmark runs there, with its own Python.
    ssh: Optional[str] = Field(
        None, description="run the benchmark on this host: user@host or user@host:port "
        "(system OpenSSH, key authentication only)")
    identity: Optional[str] = Field(None, description="private key file for ssh")
    known_hosts: Optional[str] = Field(
        None, description="known_hosts file holding the device's host key "
        "(default: ~/.ssh/known_hosts); an unknown or changed key is refused")
    accept_new_host_key: bool = Field(
        False, description="trust an unknown host key on first use and record it "
        "(a changed key is still refused)")
    python: Optional[str] = Field(
        None, description="the Python that runs the benchmark: on an SSH target the "
        "device's (default python3, e.g. a venv's /home/pi/edge/bin/python); on this "
        "machine another environment's (default: this one), e.g. one with "
        "onnxruntime-openvino, which cannot share an environment with onnxruntime")
    workdir: str = Field("/tmp", description="folder on the device for the temporary "
                         "directory (removed afterwards)")
    connect_timeout_s: float = Field(10.0, gt=0, le=300)
    emulated: bool = Field(
        False, description="the host emulates the device (e.g. qemu-user): its timings are "
        "labelled as emulation and never pass a budget")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value):
        return {"profile": value} if isinstance(value, str) else value

    @field_validator("ssh")
    @classmethod
    def _valid_address(cls, value):
        if value is not None:
            from compress.remote.ssh import parse_address
            parse_address(value)  # ValueError names the expected form
        return value

    @model_validator(mode="after")
    def _ssh_options_need_ssh(self):
        remote_only = [key for key in ("identity", "known_hosts") if getattr(self, key)]
        if self.accept_new_host_key:
            remote_only.append("accept_new_host_key")
        if remote_only and not self.ssh:
            raise ValueError(f"{', '.join(remote_only)} only apply to a target with ssh: "
                             "user@host[:port]")
        return self


def _stage_union():
    members = tuple(spec.config_cls for spec in STAGES.values())
    return Annotated[Union[members], Field(discriminator="type")]


Stage = _stage_union()


class Pipeline(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="names the run directory")
    model: ModelSpec
    data: DataSpec = DataSpec()
    stages: tuple[Stage, ...] = Field(min_length=1)
    targets: tuple[TargetSpec, ...] = ()
    output: str = Field("runs", description="parent of the run directory runs/<name>/")
    seed: int = 0

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)

    @field_validator("stages")
    @classmethod
    def _benchmark_last(cls, stages):
        for index, stage in enumerate(stages[:-1]):
            if not STAGES[stage.type].produces_artifacts:
                raise ValueError(f"stage {index} ({stage.type}) must be the last stage")
        return stages

    @model_validator(mode="after")
    def _tflite_source_is_only_benchmarked(self):
        if self.model.tflite is None:
            return self
        for index, stage in enumerate(self.stages):
            if STAGES[stage.type].produces_artifacts:
                raise PydanticCustomError(
                    "stage_reference", "stage {number} ({type}) needs a torch or ONNX model; "
                    "a TFLite model source (model.tflite) can only be benchmarked: keep just "
                    "the benchmark stage, or start from the torch model",
                    {"index": index, "key": "type", "number": index + 1, "type": stage.type})
        return self

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


def _format_error(error: dict, file: str | None, lines: dict) -> ConfigError:
    loc = tuple(error["loc"])
    field = ".".join(str(part) for part in loc) or "(top level)"
    message = error["msg"]
    if error["type"] == "union_tag_invalid":
        message = (f"unknown stage type '{error['ctx']['tag']}'. Known stage types: "
                   f"{', '.join(sorted(STAGES))}")
    elif error["type"] == "extra_forbidden":
        message = "unknown key (remove it or check its spelling)"
    elif error["type"] == "missing":
        message = "required key is missing"
    elif error["type"] == "stage_reference":  # raised on the whole pipeline: point at the stage
        loc = ("stages", error["ctx"]["index"], error["ctx"]["key"])
        field = ".".join(str(part) for part in loc)
    elif error["type"] == "value_error":
        message = message.removeprefix("Value error, ")
    return ConfigError(message, file=file, line=line_for(loc, lines), field=field)


def parse_pipeline(data: object, *, file: str | None = None, lines: dict | None = None,
                   base_dir: Path | None = None) -> Pipeline:
    if not isinstance(data, dict):
        raise ConfigError("a pipeline must be a YAML mapping with name, model and stages",
                          file=file, line=1)
    try:
        pipeline = Pipeline.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # An invalid stage also empties `stages`; "too short" would only repeat the cause.
        errors = [e for e in errors if e["type"] != "too_short"] or errors
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
