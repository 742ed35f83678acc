"""The Python API: the same objects pipeline.yaml describes."""
from __future__ import annotations

from pathlib import Path
from typing import Union

from compress.config import Pipeline, load_pipeline
from compress.runner import Result, run_pipeline


def run(pipeline: Union[str, Path, Pipeline], *, force: bool = False, strict: bool = False,
        quiet: bool = True) -> Result:
    """Run a pipeline given as a YAML path or a `Pipeline` object.

    Returns a Result with `artifacts`, `benchmarks`, `verdicts`, `passed` and `run_dir`.
    Raises a CompressError subclass for bad input (ConfigError, DataError, ModelError, ...).
    """
    config_text = None
    if isinstance(pipeline, (str, Path)):
        config_text = Path(pipeline).read_text() if Path(pipeline).is_file() else None
        pipeline = load_pipeline(pipeline)
    return run_pipeline(pipeline, force=force, strict=strict, quiet=quiet, config_text=config_text)
