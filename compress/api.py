"""The Python API: the same objects pipeline.yaml describes, and Python objects in the
places the YAML names things (a torch module, an onnx.ModelProto, data, functions)."""
from __future__ import annotations

from pathlib import Path
from typing import Union

from compress.config.pipeline import Pipeline, load_pipeline, parse_pipeline
from compress.errors import NoSpace
from compress.runner.run import Result, run_pipeline


def pipeline(**fields) -> Pipeline:
    """A Pipeline from keyword arguments, as the YAML document would give them; a mistake
    is a ConfigError naming the field (Pipeline(...) itself raises pydantic's error)."""
    return parse_pipeline(fields)


def renamed(pipeline: Pipeline, name: str | None, output: str | None) -> Pipeline:
    """The pipeline with its run folder moved: `--name` and `--output` (relative to the
    working directory, as a path typed in a shell is) over the YAML's."""
    update = {}
    if name is not None:
        update["name"] = _checked_name(name)
    if output is not None:
        update["output"] = str(Path(output).resolve())
    return pipeline.model_copy(update=update) if update else pipeline


def _checked_name(name: str) -> str:
    """`--name` checked by the rule the YAML's `name` follows (config.RunName)."""
    from pydantic import TypeAdapter, ValidationError
    from compress.config.pipeline import RunName
    from compress.errors import ConfigError
    from profiles.validation import message_of
    try:
        return TypeAdapter(RunName).validate_python(name)
    except ValidationError as exc:
        raise ConfigError(f"--name {name!r}: a run name is a folder name (letters, digits, "
                          f"_ . -): {message_of(exc.errors()[0])}") from None


def run(pipeline: Union[str, Path, Pipeline, dict], *, force: bool = False,
        strict: bool = False, quiet: bool = True, name: str | None = None,
        output: str | None = None, executor: str | None = None) -> Result:
    """Run a pipeline given as a YAML path, a `Pipeline` object or a dict of its fields.
    `name` and `output` put the run in another folder than the pipeline names;
    `executor` (local or ray) replaces the pipeline's executor type, its other settings
    kept when the type is the same.

    Returns a Result with `artifacts`, `benchmarks`, `verdicts`, `passed` (every gated
    target has something to ship; `strict`: shippable, not a candidate) and `run_dir`.
    Raises a CompressError subclass for bad input (ConfigError, DataError, ModelError, ...);
    a full disk (an OSError ENOSPC or EDQUOT) as NoSpace.
    """
    config_text = None
    if isinstance(pipeline, (str, Path)):
        path = pipeline
        pipeline = load_pipeline(path)  # checks the file (UTF-8 and all) before it is kept
        config_text = Path(path).read_text(encoding="utf-8")
    elif isinstance(pipeline, dict):
        pipeline = parse_pipeline(pipeline)
    elif not isinstance(pipeline, Pipeline):
        from compress.errors import ConfigError
        raise ConfigError(f"compress.run takes a YAML path, a Pipeline or a dict, not "
                          f"{type(pipeline).__name__}")
    pipeline = with_executor(renamed(pipeline, name, output), executor)
    try:
        result = _run_resolved(pipeline, force, strict, quiet, config_text)
        if pipeline.ship is not None and result.report:   # `ship: {to: DIR}`
            from compress.runner.ship import ship_all
            ship_all(result.report, result.run_dir / "report.json",
                     pipeline.resolve(pipeline.ship.to), strict, _note(quiet))
        return result
    except Exception as exc:
        full = NoSpace.found_in(exc)   # ENOSPC, EDQUOT: the user's disk, not a bug
        if full is None or full is exc:
            raise
        raise full from exc


def _run_resolved(pipeline: Pipeline, force: bool, strict: bool, quiet: bool,
                  config_text: str | None) -> Result:
    """The pipeline, its folder and executor settled: its search, or its one run."""
    if pipeline.search is not None:
        from compress.search.driver import run_search
        return run_search(pipeline, force=force, strict=strict, quiet=quiet,
                          config_text=config_text, note=_note(quiet))
    if pipeline.executor.type != "local" and not quiet:
        _note(quiet)(f"executor {pipeline.executor.type}: runs a search's trials; this "
                     "pipeline has no search:, so it runs here")
    return run_pipeline(pipeline, force=force, strict=strict, quiet=quiet, config_text=config_text)


def with_executor(pipeline: Pipeline, executor: str | None) -> Pipeline:
    """`--executor`: the pipeline with that executor type (its YAML settings kept when it
    names the same type)."""
    if executor is None or executor == pipeline.executor.type:
        return pipeline
    from pydantic import TypeAdapter, ValidationError
    from compress.config.executor import Executor
    from compress.errors import ConfigError
    try:
        chosen = TypeAdapter(Executor).validate_python({"type": executor})
    except ValidationError:
        raise ConfigError(f"--executor {executor!r}: give local or ray") from None
    return pipeline.model_copy(update={"executor": chosen})


def _note(quiet: bool):
    import sys

    from runtimes.safe_text import safe_text   # a trial's note carries user data
    return ((lambda message: None) if quiet else
            (lambda message: print(safe_text(message), file=sys.stderr)))
