"""Import heavy libraries only when a stage needs them.

`compress validate` and `--help` must stay instant, and a missing optional package must
say which pip command fixes it instead of ending in an ImportError traceback.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from compress.errors import MissingDependency

# module name -> the pip distribution that provides it
_PIP_NAMES = {
    "torch": "torch==2.13.0",
    "onnx": "onnx",
    "onnxscript": "onnxscript",
    "onnxruntime": "onnxruntime",
    "onnxruntime.quantization": "onnxruntime",
    "neural_compressor": "neural-compressor==3.10 py-cpuinfo prettytable accelerate",
    "litert_torch": "litert-torch",
    "torch_pruning": "torch-pruning",
    "optuna": "optuna",                                    # the search extra
    "plotly": "plotly",                                    # the report extra
    "mlflow": "mlflow-skinny sqlalchemy alembic",          # the tracking extra
    "ray": "ray",                                          # the scale extra
    "grpc": "ray[client]",                                 # Ray's client (ray://)
    "onnxruntime_genai": "edge-compress[llm]",             # causal language models
    "transformers": "edge-compress[llm]",
    "gguf": "edge-compress[llm]",
    "llama_cpp": "edge-compress[llamacpp]",                # compiles llama.cpp: make llama-cpp
}


def require(module: str, purpose: str) -> ModuleType:
    """Import `module` or raise MissingDependency naming the pip command that fixes it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        root = module.split(".")[0]
        pip_name = _PIP_NAMES.get(module, _PIP_NAMES.get(root, root))
        raise MissingDependency(module, pip_name, purpose) from exc
