"""`data:` of pipeline.yaml: where calibration, evaluation and training data come from,
and the metric the accuracy budget is checked on."""
from __future__ import annotations

from typing import Literal, Optional, Union

import numpy as np
from pydantic import Field, PositiveInt, model_validator
from pydantic.json_schema import SkipJsonSchema

from compress.model.spec import CallableName, WithObjects
from compress.core.pyobjects import PyData, PyObject, from_yaml
from compress.stagebase import Strict
from runtimes.metrics import PRIMARY_CHOICES
from runtimes.suggest import did_you_mean

_SETTINGS = {"loader", "npz", "kwargs", "value"}


def _is_settings(value: dict) -> bool:
    """A mapping of DataSource settings, as opposed to data ({input name: array})."""
    return set(value) <= _SETTINGS and not any(
        isinstance(v, np.ndarray) or hasattr(v, "__array__") for v in value.values())


class DataSource(WithObjects):
    loader: Optional[Union[CallableName, SkipJsonSchema[PyObject]]] = Field(
        None, description="`module.path:function` returning the data: arrays with samples on "
        "the first axis ({input: array, labels: array}), or a list / iterable of feeds (one "
        "dict {input: array shaped as one model call} per call, with an optional `labels` "
        "entry), or a torch Dataset / DataLoader (from Python also the function itself)")
    kwargs: dict = Field(default_factory=dict, description="arguments for the loader")
    npz: Optional[str] = Field(None, description=".npz file, one array per input (+ labels)")
    value: SkipJsonSchema[Optional[PyData]] = None   # from Python: the data itself

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value, info):
        # `calibration: data.py:load` or `calibration: calib.npz`; from Python the data
        # (arrays, feeds, a generator, a DataLoader) or a loader function itself
        if isinstance(value, str):
            return {"npz": value} if value.endswith(".npz") else {"loader": value}
        if isinstance(value, (DataSource, type(None))):
            return value
        if isinstance(value, dict) and _is_settings(value):
            return value
        if from_yaml(info):  # no data can be written in YAML: a misspelt key, a number
            unknown = sorted(set(value) - _SETTINGS) if isinstance(value, dict) else None
            raise ValueError(f"unknown key(s) {unknown}: the keys are loader, kwargs and npz"
                             f"{did_you_mean(str(unknown[0]), _SETTINGS - {'value'})}"
                             if unknown else "give `module:function`, a `file.npz`, or "
                             "{loader: module:function, kwargs: {...}}")
        if callable(value) and not hasattr(value, "__iter__"):
            return {"loader": value}
        return {"value": value}

    @model_validator(mode="after")
    def _one_kind(self):
        given = [key for key in ("loader", "npz", "value") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of `loader: module:function` or `npz: PATH`")
        if self.kwargs and self.loader is None:
            raise ValueError("kwargs are the loader's arguments: they need `loader:`")
        return self

    @property
    def label(self) -> str:
        if self.npz:
            return self.npz
        return self.loader if isinstance(self.loader, str) else "data given from Python"


class Metric(WithObjects):
    type: Literal["accuracy", "fidelity", "custom"] = Field(
        description="accuracy: top-1 of the first output against integer labels; fidelity: "
        "agreement with the original model's outputs, for any model (per output and overall: "
        "cosine, SQNR in dB, mean and max absolute error; top-1 agreement); custom: your "
        "own function")
    primary: Literal[PRIMARY_CHOICES] = Field(  # type: ignore[valid-type]
        "auto", description="for fidelity: the number budgets are checked on; auto: each "
        "output judged by the figure that fits it (top-1 agreement for class scores, cosine "
        "for boxes, landmarks, embeddings and the like: docs/reference.md, Metric), the "
        "worst of them")
    pairs: bool = Field(
        False, description="for fidelity: rows 2i and 2i+1 of the evaluation data are pairs "
        "(e.g. sentences); also report pair_spearman, the Spearman correlation of the "
        "pairs' cosine similarities with the original model's")
    function: Optional[Union[CallableName, SkipJsonSchema[PyObject]]] = Field(
        None, description="for custom: `module:fn` (from Python the function) called as "
        "fn(predictions, references) -> float, where predictions holds, per evaluation feed, "
        "the variant's outputs as a dict {output name: array} and references, per feed, the "
        "labels when the data has them (a dict; an array label as {'labels': array}), else "
        "the original model's outputs")
    higher_is_better: bool = Field(
        True, description="for custom: whether a larger value is better (the drop is "
        "baseline - value, else value - baseline)")

    @model_validator(mode="after")
    def _settings_fit_type(self):
        if self.primary == "pair_spearman" and not self.pairs:
            raise ValueError("primary: pair_spearman needs `pairs: true` (rows 2i and 2i+1 "
                             "of the evaluation data form pair i)")
        if (self.pairs or self.primary != "auto") and self.type != "fidelity":
            raise ValueError("primary and pairs apply to `type: fidelity`")
        if (self.function is None) == (self.type == "custom"):
            raise ValueError("type custom needs `function: module:fn`" if self.type == "custom"
                             else "function applies to `type: custom`")
        if not self.higher_is_better and self.type != "custom":
            raise ValueError("higher_is_better applies to `type: custom`")
        return self

    def drop(self, baseline: float, value: float) -> float:
        """How much worse `value` is than `baseline` (positive = worse)."""
        return value - baseline if not self.higher_is_better else baseline - value


class TextData(WithObjects):
    """Text for a causal language model: tokenized once with the model's own tokenizer
    (its hash recorded); the first `evaluation_tokens` ids are scored on every variant,
    the last `calibration_tokens` ids (apart from them) rank its layers."""
    file: Optional[str] = Field(None, description="a UTF-8 text file")
    loader: Optional[Union[CallableName, SkipJsonSchema[PyObject]]] = Field(
        None, description="`module:function` returning a string or a list of strings "
        "(joined by blank lines)")
    python_docs: bool = Field(
        False, description="English text that ships with CPython (pydoc_data.topics): no "
        "download, the same on every machine")
    evaluation_tokens: PositiveInt = Field(2048, description="tokens perplexity, KL and "
                                           "top-1 agreement are measured on")
    calibration_tokens: PositiveInt = Field(256, description="tokens a measured mix ranks "
                                            "the layers on (taken from the text's end)")
    window: PositiveInt = Field(512, description="tokens per scored window (one model call "
                                "from an empty cache each)")
    prompts: tuple[str, ...] = Field((), description="prompts whose greedy generations are "
                                     "compared with the float model's, token for token")

    @model_validator(mode="after")
    def _one_source(self):
        given = [self.file is not None, self.loader is not None, self.python_docs]
        if sum(given) != 1:
            raise ValueError("give exactly one of `file: PATH`, `loader: module:function` "
                             "or `python_docs: true`")
        return self

    @property
    def label(self) -> str:
        if self.file:
            return self.file
        if self.python_docs:
            return "pydoc_data.topics (CPython)"
        return self.loader if isinstance(self.loader, str) else "text given from Python"


class DataSpec(Strict):
    calibration: Optional[DataSource] = Field(
        None, description="data to calibrate quantization on (and to check exports against)")
    evaluation: Optional[DataSource] = Field(
        None, description="held-out data the metric is computed on, on every target")
    train: Optional[DataSource] = Field(
        None, description="training data for fine-tuning and distillation (labels optional)")
    metric: Optional[Metric] = Field(
        None, description="default: accuracy when the evaluation data has labels, else fidelity")
    text: Optional[TextData] = Field(
        None, description="for a causal language model (model.causal_lm): the text it is "
        "calibrated and evaluated on, in place of calibration/evaluation/train")


# the roles tensor data plays (calibration, evaluation, train): every DataSpec field but
# the metric and a language model's text
DATA_ROLES = tuple(name for name in DataSpec.model_fields if name not in ("metric", "text"))
