"""onnxruntime adapter."""
from __future__ import annotations

import os

import numpy as np

from runtimes.errors import RuntimeInputError
from runtimes.session import Session, TensorSpec

# onnxruntime reports element types as strings like "tensor(float)".
_ORT_TO_NUMPY = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8",
    "tensor(uint8)": "uint8", "tensor(bool)": "bool",
}


class OnnxRuntimeSession(Session):
    engine = "onnxruntime"

    def __init__(self, path: str, threads: int | None = None,
                 providers: list[str] | None = None):
        import onnxruntime as ort  # the device extra installs it; imported late for speed

        if not os.path.isfile(path):
            raise RuntimeInputError(f"model file not found: {path}")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
            options.inter_op_num_threads = 1
        # A benchmark must not be skewed by threads spinning after each run.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1")
        providers = providers or ["CPUExecutionProvider"]
        try:
            self._session = ort.InferenceSession(path, options, providers=providers)
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise RuntimeInputError(
                f"onnxruntime cannot load {path}: {str(exc).strip().splitlines()[0]}. "
                "Check that the file is a complete ONNX model (re-export it if it was "
                "truncated or edited).") from None
        self.threads = threads
        self._version = ort.__version__
        self.inputs = tuple(
            TensorSpec(i.name, tuple(d if isinstance(d, int) else None for d in i.shape),
                       _ORT_TO_NUMPY.get(i.type, i.type))
            for i in self._session.get_inputs())
        self.outputs = tuple(o.name for o in self._session.get_outputs())

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._session.run(None, feeds)

    def describe(self) -> dict:
        return {"engine": self.engine, "version": self._version, "threads": self.threads,
                "providers": self._session.get_providers()}
