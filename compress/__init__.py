"""Compress a trained model for an edge device and check it against the device's budget.

    import compress
    result = compress.run("pipeline.yaml")
    result.passed, result.verdicts, result.benchmarks

The stages are classes too, the YAML's `{type: ..., ...}` built in Python (a mistake is
a ConfigError naming the setting): `compress.Quantize(scheme="int8-static")`,
`compress.ExportOnnx(opset=17)`, `compress.Benchmark(runs=200)`, ...
"""
from compress.errors import (CompressError, ConfigError, DataError, MissingDependency,
                             ModelError, RemoteError, StageError)

_NAMES = ["run", "pipeline", "load_pipeline", "Pipeline", "Result", "CompressError",
          "ConfigError", "DataError", "ModelError", "StageError", "MissingDependency",
          "RemoteError"]
__version__ = "0.1.0"


def __getattr__(name):
    # Lazy so `import compress` (and `compress --help`) stays instant.
    if name in ("run", "pipeline"):
        from compress import api
        return getattr(api, name)
    if name in ("Pipeline", "load_pipeline"):
        from compress.config import pipeline as config
        return getattr(config, name)
    if name == "Result":
        from compress.runner.run import Result
        return Result
    if name == "__all__":   # the stage classes are read from their registry, on demand
        return [*_NAMES, *sorted(_stage_classes())]
    classes = _stage_classes() if name[:1].isupper() else {}
    if name in classes:
        return classes[name]
    raise AttributeError(name)


def _stage_classes() -> dict:
    """Each stage's Python class by its name (`Quantize`, `ExportOnnx`, ...): what its
    module registered (compress/stagebase.py), so a new stage is in the API as it lands."""
    import compress.stages  # noqa: F401  (importing it registers every stage)
    from compress.stagebase import STAGES
    return {spec.api_class.__name__: spec.api_class for spec in STAGES.values()}
