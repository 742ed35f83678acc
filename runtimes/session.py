"""What every runtime adapter looks like, and a fake one for tests.

A session is deliberately small, like an HTTP transport: `inputs`, `outputs`,
`run(feeds) -> list of arrays`, `close()`. Everything else (timing, metrics) is written
once against this interface so numbers are comparable across engines.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple  # ints, or strings / None for dynamic dimensions
    dtype: str    # numpy dtype name, e.g. "float32"
    # a quantized input presented as float: the integer type the file stores, which is
    # also fed as it is (data already quantized, e.g. a microcontroller's features)
    native_dtype: str | None = None

    def batch_dim_is_dynamic(self) -> bool:
        return bool(self.shape) and not isinstance(self.shape[0], int)


class Session(abc.ABC):
    """Base class: adapters fill in `inputs`, `outputs`, `engine` and `run`."""

    engine: str = "none"
    inputs: Sequence[TensorSpec] = ()
    outputs: Sequence[str] = ()

    @abc.abstractmethod
    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run the model once; outputs in the model's output order."""

    def native_feeds(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`feeds` converted once to what the model takes (e.g. int8 for a quantized
        input), so timing measures the model and not a conversion a deployment would
        not do per frame."""
        return feeds

    def describe(self) -> dict:
        """Engine details for the report (version, providers, threads)."""
        return {"engine": self.engine}

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FunctionSession(Session):
    """A session backed by a plain function: the mock transport of this layer."""

    engine = "function"

    def __init__(self, fn: Callable[..., Sequence[np.ndarray]], inputs: Sequence[TensorSpec],
                 outputs: Sequence[str] = ("output",)):
        self._fn, self.inputs, self.outputs = fn, tuple(inputs), tuple(outputs)

    def run(self, feeds):
        return list(self._fn(**feeds))
