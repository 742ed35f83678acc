"""The Python API: the same objects pipeline.yaml describes, and Python objects in the
places the YAML names things (a torch module, an onnx.ModelProto, data, functions)."""
from __future__ import annotations

from pathlib import Path
from typing import Union

from compress.config import Pipeline, load_pipeline, parse_pipeline
from compress.runner import Result, run_pipeline


def pipeline(**fields) -> Pipeline:
    """A Pipeline from keyword arguments, as the YAML document would give them; a mistake
    is a ConfigError naming the field (Pipeline(...) itself raises pydantic's error)."""
    return parse_pipeline(fields)


def run(pipeline: Union[str, Path, Pipeline, dict], *, force: bool = False,
        strict: bool = False, quiet: bool = True) -> Result:
    """Run a pipeline given as a YAML path, a `Pipeline` object or a dict of its fields.

    Returns a Result with `artifacts`, `benchmarks`, `verdicts`, `passed` and `run_dir`.
    Raises a CompressError subclass for bad input (ConfigError, DataError, ModelError, ...).
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
    return run_pipeline(pipeline, force=force, strict=strict, quiet=quiet, config_text=config_text)
