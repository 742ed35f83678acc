"""`model:` of pipeline.yaml: the model as the user has it (torch, ONNX or TFLite, by name
or, from Python, as an object) and the inputs it takes in one call."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (ConfigDict, Field, PositiveInt, StringConstraints, model_validator)
from pydantic.json_schema import SkipJsonSchema

from compress.core.pyobjects import PyObject, is_onnx_model, is_torch_module
from compress.stagebase import Strict
from runtimes import formats

DTYPES = Literal["float32", "float16", "float64", "int64", "int32", "int16", "int8",
                 "uint8", "bool"]
# dotted names, no part empty: `.model:build` or `model.:build` names no module
CALLABLE_NAME = r"^\w+(\.\w+)*:\w+(\.\w+)*$"
CallableName = Annotated[str, StringConstraints(pattern=CALLABLE_NAME)]


class WithObjects(Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True,
                              allow_inf_nan=False)


class TensorDecl(Strict):
    name: str = Field(description="the model's input name")
    shape: tuple[Optional[PositiveInt], ...] = Field(
        description="the shape of this input in one model call, in the model's own layout "
        "(batch wherever the model has it; [] for a 0-d scalar), e.g. [1, 3, 224, 224]; "
        "null for a dimension left dynamic (each feed of the data gives its size)")
    dtype: DTYPES = Field("float32", description="element type")

    @property
    def dynamic_dims(self) -> list[int]:
        return [axis for axis, size in enumerate(self.shape) if size is None]


class TorchSource(WithObjects):
    factory: Optional[Union[CallableName, SkipJsonSchema[PyObject]]] = Field(
        None, description="`module.path:callable` returning a torch.nn.Module (from Python: "
        "the callable itself)")
    checkpoint: Optional[str] = Field(
        None, description="state_dict file, loaded with torch.load(weights_only=True)")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="arguments for the factory")
    module: SkipJsonSchema[Optional[PyObject]] = None   # from Python: the nn.Module itself

    @model_validator(mode="before")
    @classmethod
    def _from_object(cls, value):
        # `torch: net` (a module) or `torch: make_net` (a factory) from Python
        if is_torch_module(value):
            return {"module": value}
        if callable(value) or isinstance(value, str):  # a class is a factory too
            return {"factory": value}
        return value

    @model_validator(mode="after")
    def _one_kind(self):
        if (self.factory is None) == (self.module is None):
            raise ValueError("give `factory: module:callable` (from Python also a torch.nn.Module "
                             "or a function returning one)")
        if self.module is not None and not is_torch_module(self.module):
            raise ValueError(f"model.torch must be a torch.nn.Module, got "
                             f"{type(self.module).__name__}")
        if self.module is not None and (self.checkpoint or self.kwargs):
            raise ValueError("checkpoint and kwargs apply to a factory; load the weights into "
                             "the module before passing it")
        if self.factory is not None and not isinstance(self.factory, str) \
                and not callable(self.factory):
            raise ValueError("factory must be `module:callable` or a callable")
        return self


def _onnx_object(value):
    if not is_onnx_model(value):
        raise ValueError(f"model.onnx must be a path or an onnx.ModelProto, got "
                         f"{type(value).__name__}")
    return value


def _language_model_object(value) -> None:
    """A transformers model (its tokenizer found where it was loaded from) or a (model,
    tokenizer) pair, given from Python."""
    model, tokenizer = value if isinstance(value, tuple) and len(value) == 2 else (value, None)
    if not (is_torch_module(model) and hasattr(model, "save_pretrained")):
        raise ValueError(f"model.causal_lm from Python must be a transformers model or a "
                         f"(model, tokenizer) pair, got {type(value).__name__}")
    if tokenizer is not None and not hasattr(tokenizer, "save_pretrained"):
        raise ValueError("model.causal_lm: the pair's second item must be a transformers "
                         f"tokenizer, got {type(tokenizer).__name__}")


class ModelSpec(WithObjects):
    torch: Optional[TorchSource] = Field(None, description="a torch model: its factory (and "
                                         "checkpoint)")
    onnx: Optional[Union[str, SkipJsonSchema[PyObject]]] = Field(
        None, description="path of an ONNX model from any exporter, opset 7 or later (from "
        "Python also an onnx.ModelProto)")
    tflite: Optional[str] = Field(
        None, description="path of a .tflite model: benchmarked as it is, and a float one can "
        "be quantized (stage quantize) with ai-edge-quantizer")
    causal_lm: Optional[Union[str, SkipJsonSchema[PyObject]]] = Field(
        None, description="a causal language model: a Hugging Face folder (config.json, "
        "weights, tokenizer) or a .gguf file (dequantized to float through transformers, "
        "recorded as such); from Python also a transformers model, or a (model, tokenizer) "
        "pair; its data are text (data.text)")
    inputs: Optional[tuple[TensorDecl, ...]] = Field(
        None, min_length=1, description="the model's inputs, in order; required for a torch "
        "model; for ONNX and TFLite read from the file when omitted (then only dynamic "
        "dimensions need the data, or a declaration, to fix them)")
    dynamic_batch: bool = Field(
        False, description="the first dimension of every input is a batch of any size: "
        "exported so, and data with samples on the first axis is cut into feeds of the "
        "declared batch")

    @model_validator(mode="after")
    def _one_source(self):
        if sum(source is not None for source in sources_of(self)) != 1:
            raise ValueError("give exactly one model source: `torch: {factory: ...}`, "
                             "`onnx: PATH`, `tflite: PATH` or `causal_lm: PATH`")
        if self.causal_lm is not None and not isinstance(self.causal_lm, str):
            _language_model_object(self.causal_lm)
        if self.causal_lm is not None and (self.inputs or self.dynamic_batch):
            raise ValueError("a causal_lm takes token ids made from data.text: leave out "
                             "inputs and dynamic_batch")
        if self.onnx is not None and not isinstance(self.onnx, str):
            _onnx_object(self.onnx)
        names = [d.name for d in self.inputs or ()]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"model.inputs names {', '.join(map(repr, twice))} twice; "
                             "give each input once")
        if self.torch is not None:
            if self.inputs is None:
                raise ValueError("a torch model needs `inputs:` (name, shape, dtype of each "
                                 "input): torch does not record them")
            dynamic = [d.name for d in self.inputs if d.dynamic_dims]
            if dynamic:
                raise ValueError(f"input(s) {', '.join(dynamic)} of a torch model need every "
                                 "dimension (use dynamic_batch: true for a batch of any size)")
        return self

    @property
    def format(self) -> str:
        """What the source is: torch, onnx, tflite or causal_lm."""
        return next(name for name, source in zip(SOURCE_NAMES, sources_of(self))
                    if source is not None)

    @property
    def language(self) -> bool:
        """Whether the source is a language model (the format table's kind): its data are
        text, its benchmark tokens/s, its budgets a profile's `language_model:`."""
        return formats.is_language(self.format)


SOURCE_NAMES = formats.names(given=True)   # ModelSpec's source fields, in their order


def sources_of(spec: ModelSpec) -> tuple:
    """The model's sources in the order of SOURCE_NAMES (one is given)."""
    return tuple(getattr(spec, name) for name in SOURCE_NAMES)
