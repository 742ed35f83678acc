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

# stage class -> the module of compress/stages/ that holds it
_STAGE_CLASSES = {"Benchmark": "benchmark", "Distill": "distill", "ExportGenai": "export_genai",
                  "ExportGguf": "export_gguf", "ExportOnnx": "export_onnx",
                  "ExportOpenVino": "export_openvino", "ExportOVGenai": "export_ovgenai",
                  "ExportTflite": "export_tflite",
                  "Prune": "prune", "Quantize": "quantize"}

__all__ = ["run", "pipeline", "load_pipeline", "Pipeline", "Result", "CompressError", "ConfigError",
           "DataError", "ModelError", "StageError", "MissingDependency", "RemoteError",
           *_STAGE_CLASSES]
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
    if name in _STAGE_CLASSES:
        import importlib
        return getattr(importlib.import_module(f"compress.stages.{_STAGE_CLASSES[name]}"), name)
    raise AttributeError(name)
