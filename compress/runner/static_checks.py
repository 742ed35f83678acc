"""What `compress validate` checks beyond the YAML, without running any work or any of
the user's code: the factories, loaders and metric functions a pipeline names are found
and read (core/find_code.py: the module located, the name among its top-level ones,
never imported), the files it names exist (checkpoints, .npz data, text, a language
model), and a local target's own Python is an executable. A run checks the same again
by importing and reading them (checks.py), and more."""
from __future__ import annotations

from pydantic import BaseModel

from compress.config.data import DATA_ROLES
from compress.core.find_code import check_named
from compress.errors import ConfigError, ModelError
from compress.stagebase import STAGES
from profiles.validation import field_of


def _file(pipeline, path: str, field: str) -> None:
    """`path` (relative to the pipeline file) is a regular file; it is not opened."""
    from compress.model.source import model_file
    try:
        model_file(pipeline.resolve(path), field)
    except ModelError as exc:   # its words fit any file a pipeline names
        raise ConfigError(str(exc)) from None


def _code(pipeline, named, field: str) -> None:
    if isinstance(named, str):   # from Python, the function itself: nothing to find
        check_named(named, pipeline.base_dir, field)


def _check_model(pipeline) -> None:
    model = pipeline.model
    if model.torch is not None:
        _code(pipeline, model.torch.factory, "model.torch.factory")
        if model.torch.checkpoint:
            _file(pipeline, model.torch.checkpoint, "model.torch.checkpoint")
    if model.language:
        from compress.model.language import check_given
        check_given(pipeline)


def _check_data(pipeline) -> None:
    data = pipeline.data
    for role in DATA_ROLES:
        source = getattr(data, role)
        if source is not None and source.npz:
            _file(pipeline, source.npz, f"data.{role}.npz")
        if source is not None:
            _code(pipeline, source.loader, f"data.{role}.loader")
    if data.metric is not None:
        _code(pipeline, data.metric.function, "data.metric.function")
    if data.text is not None:
        if data.text.file:
            _file(pipeline, data.text.file, "data.text.file")
        _code(pipeline, data.text.loader, "data.text.loader")


def _check_stages(pipeline) -> None:
    """A stage's own models (distill's teacher and student): factory and checkpoint."""
    for index, stage in enumerate(pipeline.stages):
        for key in type(stage).model_fields:
            value = getattr(stage, key)
            if not isinstance(value, BaseModel):
                continue
            where = ("stages", index, stage.type, key)
            if isinstance(getattr(value, "factory", None), str):
                _code(pipeline, value.factory, field_of((*where, "factory"), STAGES))
            if isinstance(getattr(value, "checkpoint", None), str):
                _file(pipeline, value.checkpoint, field_of((*where, "checkpoint"), STAGES))


def check_without_running(pipeline) -> None:
    """Everything above; the first problem found is raised (a CompressError, exit 2)."""
    from compress.runner.checks import check_target_pythons
    _check_model(pipeline)
    _check_data(pipeline)
    _check_stages(pipeline)
    check_target_pythons(pipeline)
