"""Compress a trained model for an edge device and check it against the device's budget.

    import compress
    result = compress.run("pipeline.yaml")
    result.passed, result.verdicts, result.benchmarks
"""
from compress.errors import (CompressError, ConfigError, DataError, MissingDependency,
                             ModelError, RemoteError, StageError)

__all__ = ["run", "pipeline", "load_pipeline", "Pipeline", "Result", "CompressError", "ConfigError",
           "DataError", "ModelError", "StageError", "MissingDependency", "RemoteError"]
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
    raise AttributeError(name)
