"""Export presets: what a kind of hardware wants from a quantized or exported model.

Each preset is a YAML file in export/presets/ (its name is the file's stem), every
setting commented with the hardware reason. A preset says, per quantize scheme, the
settings a `quantize` stage gets (activation and weight types, per-channel, reduce_range,
symmetry, onnxruntime's QNN config), whether every dynamic dimension is fixed
(`static_shapes`), the `export.tflite` settings (mode, I/O, NHWC), and the runtime it is
meant for (execution providers, a LiteRT delegate), recorded with the artifact.

A stage takes the preset it names (`preset:`), or else the one its targets' profiles name
(`export: {preset: ...}`), counting only targets whose engines run what the stage makes
and whose preset has settings for it. Settings the stage sets itself always win.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

FOLDER = Path(__file__).with_suffix("")  # export/presets/
NONE = "none"  # a stage's `preset: none`: no preset, whatever the targets ask for


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class QuantizeSettings(_Strict):
    """What a preset sets on a `quantize` stage for one scheme (fields of that stage)."""
    activations: Optional[Literal["uint8", "int8", "uint16", "int16"]] = None
    weights: Optional[Literal["int8", "uint8"]] = None
    per_channel: Optional[bool] = None
    reduce_range: Optional[bool] = None
    symmetric_activations: Optional[bool] = None
    symmetric_weights: Optional[bool] = None
    quantize_bias: Optional[bool] = None
    qnn: Optional[bool] = None
    keep_io_types: Optional[bool] = None


# export.tflite's modes (profiles/schema.py's Export.tflite_mode lists them too: profiles
# import nothing from export)
TFLITE_MODES = ("fp32", "fp16", "dynamic-int8", "int8")


class TfliteSettings(_Strict):
    """What a preset sets on an `export.tflite` stage."""
    mode: Optional[Literal[TFLITE_MODES]] = None  # type: ignore[valid-type]
    io: Optional[Literal["float", "int8"]] = None
    channels_last: Optional[bool] = None
    op_check: Optional[Literal["edgetpu"]] = Field(
        None, description="ops the target's compiler accepts, checked on the export (not a "
        "stage setting: recorded for the op check)")


class Provider(_Strict):
    name: str
    options: dict[str, Union[str, int, float, bool]] = Field(default_factory=dict)


class RuntimeHints(_Strict):
    """The runtime the preset's models are meant for (recorded with each artifact)."""
    providers: tuple[Provider, ...] = ()
    delegate: Optional[str] = None


class Preset(_Strict):
    name: str
    description: str
    static_shapes: bool = False
    quantize: dict[Literal["int8-static", "int8-dynamic", "int4-weight-only", "fp16"],
                   QuantizeSettings] = Field(default_factory=dict)
    tflite: Optional[TfliteSettings] = None
    runtime: RuntimeHints = RuntimeHints()

    def for_quantize(self, scheme: str) -> Optional[dict]:
        """The quantize stage settings for `scheme` (static_shapes included), or None."""
        section = self.quantize.get(scheme)
        if section is None:
            return None
        return {**section.model_dump(exclude_none=True), "static_shapes": self.static_shapes}

    def for_tflite(self) -> Optional[dict]:
        """The export.tflite stage settings, or None."""
        if self.tflite is None:
            return None
        return self.tflite.model_dump(exclude_none=True, exclude={"op_check"})

    def covers(self) -> str:
        """What the preset has settings for, for messages."""
        parts = [f"quantize {scheme}" for scheme in self.quantize]
        if self.tflite:
            mode = f" mode {self.tflite.mode}" if self.tflite.mode else ""
            parts.append(f"export.tflite{mode}")
        return ", ".join(parts) or "nothing"


def names() -> list[str]:
    return sorted(path.stem for path in FOLDER.glob("*.yaml"))


@lru_cache(maxsize=None)
def get(name: str) -> Preset:
    """The preset called `name`; ValueError listing the known ones when there is none."""
    import yaml

    path = FOLDER / f"{name}.yaml"
    if name not in names():
        raise ValueError(f"unknown preset '{name}'; known presets: {', '.join(names())} "
                         f"(or '{NONE}' for no preset)")
    data = yaml.safe_load(path.read_text())
    try:
        return Preset.model_validate({"name": name, **data})
    except ValidationError as exc:  # a broken file shipped with the package is a bug
        raise RuntimeError(f"export preset file {path} is invalid: {exc}") from exc


def check_name(name: Optional[str]) -> Optional[str]:
    """For validators: `name` if it is a preset, `none` or None; else ValueError."""
    if name is not None and name != NONE:
        get(name)
    return name


# a stage's `preset` field: a preset's name, `none` or unset
PresetName = Annotated[Optional[str], AfterValidator(check_name)]


def fill(config, values: dict, source: str):
    """`config` (a stage) with `values` for the settings it leaves unset; ValueError
    starting with `source` when the result is not a valid stage."""
    unset = {k: v for k, v in values.items() if k not in config.model_fields_set}
    try:
        return type(config).model_validate({**config.model_dump(exclude_unset=True), **unset})
    except ValidationError as exc:
        raise ValueError(f"{source}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") \
            from None


def apply(config, targets: list, engine: str, settings_of: Callable[[Preset], Optional[dict]],
          what: str):
    """`config` (a stage with a `preset` field) with its preset's settings for what it
    leaves unset: the preset it names, else the one the targets' profiles name ([(name,
    Profile)]; only targets whose `runtime.engines` include `engine` and whose preset has
    settings for this stage, `settings_of(preset)` not None). ValueError when a target
    names an unknown preset, the named preset has nothing for the stage (`what`), or the
    targets disagree."""
    wanted = {}
    for name, profile in targets:  # every target's preset must exist, used here or not
        chosen = profile.export.preset
        if chosen and chosen != NONE:
            try:
                preset = get(chosen)
            except ValueError as exc:
                raise ValueError(f"target {name}: export.preset: {exc}") from None
            if profile.runtime.runs(engine) and settings_of(preset) is not None:
                wanted[name] = preset.name
    if config.preset == NONE:
        return config
    if config.preset is not None:
        preset = get(config.preset)
        if settings_of(preset) is None:
            raise ValueError(f"preset {preset.name} has no settings for {what} (it has "
                             f"settings for {preset.covers()}); pick another preset or drop it")
        source = f"preset {preset.name}"
    else:
        if not wanted:
            return config
        if len(set(wanted.values())) > 1:
            asked = ", ".join(f"{name} wants {preset}" for name, preset in wanted.items())
            raise ValueError(f"the targets ask for different export presets ({asked}); set "
                             "`preset` on this stage (`none` for no preset), or add one stage "
                             "per preset")
        preset = get(next(iter(wanted.values())))
        source = f"preset {preset.name} (asked for by {', '.join(wanted)})"
    return fill(config, {**settings_of(preset), "preset": preset.name}, source)


def record(config, settings: dict) -> dict[str, Any]:
    """What the artifact meta says about the preset a stage applied: its name, what it
    sets, which of those the stage overrode (value kept), and the runtime it is for."""
    preset = get(config.preset)
    overridden = {k: getattr(config, k) for k, v in settings.items()
                  if getattr(config, k) != v}
    meta = {"name": preset.name, "description": preset.description, "sets": settings,
            "overridden": overridden}
    runtime = preset.runtime.model_dump(exclude_defaults=True)
    if preset.tflite is not None and preset.tflite.op_check:
        meta["op_check"] = preset.tflite.op_check
    return {**meta, "runtime": runtime} if runtime else meta
