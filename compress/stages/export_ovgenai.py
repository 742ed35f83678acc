"""`export.ovgenai`: a causal language model (Hugging Face weights) -> an OpenVINO GenAI
folder (a stateful OpenVINO IR whose KV cache is the model's state, and its tokenizer as
openvino-tokenizers IRs), as `openvino_genai.LLMPipeline` opens it; its weights, as
given, checked against torch on the evaluation text (export.genai's parity), or
compressed by NNCF (`weights: int8 | int4`, with its data-aware options on the text's
calibration ids: AWQ, scale estimation, GPTQ, a mixed ratio).

The IR is made by OpenVINO's own converter (openvino.convert_model) on a wrapper that
takes the cache as inputs and builds its own causal mask, then made stateful as
OpenVINO GenAI expects (inputs input_ids, attention_mask, position_ids, beam_idx; output
logits): optimum-intel, which does the same, pins an older transformers than this
project's.
"""
from __future__ import annotations

import inspect
import logging
import shutil
import warnings
from typing import Literal

from pydantic import Field, PositiveInt, confloat, model_validator

from compress.core.artifacts import Output
from compress.core.lazy import require
from compress.errors import ModelError
from compress.stagebase import register
from compress.stages.export_genai import LMExport, parity

INT4_SETTINGS = ("symmetric", "group_size", "ratio", "all_layers", "awq", "scale_estimation",
                 "gptq", "calibration_window")
# The files LLMPipeline reads beside the IRs (its end ids, the chat template)
_KEPT = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
         "chat_template.jinja")


class ExportOVGenai(LMExport):
    # 1: the stateful IR by OpenVINO's converter, NNCF weight compression
    cache_version = 1
    type: Literal["export.ovgenai"] = Field(
        "export.ovgenai", description="a causal language model to an OpenVINO GenAI folder "
        "(a stateful OpenVINO IR and its tokenizer), float checked against torch, or its "
        "weights compressed by NNCF")
    weights: Literal["float", "int8", "int4"] = Field(
        "float", description="float: as given, checked against torch; int8: NNCF's INT8 "
        "(asymmetric, per channel) on every weight; int4: NNCF's 4-bit groups, the "
        "embedding table and output head at INT8 (all_layers: at 4 bits too)")
    symmetric: bool = Field(False, description="int4: zero point 0 (NNCF's INT4_SYM)")
    # 64 divides the hidden size of every language model of the corpus (SmolLM2-135M's
    # 576, Gemma 3 270M's 640); NNCF's 128 does not divide 576 and is refused there
    group_size: PositiveInt = Field(64, description="int4: weights per scale")
    ratio: confloat(gt=0, le=1) = Field(
        1.0, description="int4: the share of layers at 4 bits, the rest at INT8 (NNCF's "
        "mixed precision, ranked on the calibration ids)")
    all_layers: bool = Field(False, description="int4: the embedding table and output head "
                             "at 4 bits too")
    awq: bool = Field(False, description="int4: NNCF's AWQ on the calibration ids")
    scale_estimation: bool = Field(False, description="int4: NNCF's scale estimation on the "
                                   "calibration ids")
    gptq: bool = Field(False, description="int4: NNCF's GPTQ on the calibration ids")
    calibration_window: PositiveInt = Field(128, description="tokens per calibration sample")

    @model_validator(mode="after")
    def _int4_settings(self):
        given = sorted(set(INT4_SETTINGS) & self.model_fields_set)
        if self.weights != "int4" and given:
            raise ValueError(f"{', '.join(given)}: settings of `weights: int4` (NNCF's 4-bit "
                             f"compression), not of weights {self.weights}")
        return self

    def formats(self) -> dict[str, str]:
        return {"causal_lm": "ovgenai"}

    def format_hint(self, given: str) -> str:
        return "export.ovgenai takes model.causal_lm, the model as given (`input: source`)"

    def baseline_settings(self) -> dict:
        keep = ("parity_tokens", "max_perplexity_change", "generated_tokens")
        return {key: getattr(self, key) for key in keep}

    def data_aware(self) -> bool:
        return self.weights == "int4" and (self.awq or self.scale_estimation or self.gptq
                                           or self.ratio < 1)


def _wrapper(model, torch):
    """The model as a traceable function: (input_ids, attention_mask, position_ids, past
    keys and values...) -> (logits, present keys and values...), with its own 4D causal
    mask so that no branch of transformers' mask code is frozen by the trace."""
    from transformers import DynamicCache
    cache_arg = ("cache" if "cache" in inspect.signature(model.forward).parameters
                 else "past_key_values")

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model   # a submodule: its weights are parameters, not constants

        def forward(self, input_ids, attention_mask, position_ids, *past):
            cache = DynamicCache(config=model.config)
            for i, layer in enumerate(cache.layers):
                layer.keys, layer.values, layer.is_initialized = past[2 * i], past[2 * i + 1], True
                layer.device, layer.dtype = past[2 * i].device, past[2 * i].dtype
            keys = torch.arange(attention_mask.shape[1])[None, None, :]
            allowed = (keys <= position_ids[:, :, None]) & (attention_mask[:, None, :] > 0)
            mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
            out = self.model(input_ids=input_ids, attention_mask=mask[:, None],
                        position_ids=position_ids, use_cache=True, **{cache_arg: cache})
            return (out.logits, *[t for layer in cache.layers for t in (layer.keys, layer.values)])
    return Wrapper()


def _traced(model, ov, torch):
    """The OpenVINO model of `model` with its cache as named inputs and outputs."""
    config = model.config
    layers, kv_heads = config.num_hidden_layers, config.num_key_value_heads
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    past, new = 3, 2    # two new tokens: one would freeze a one-token branch of attention
    names = ["input_ids", "attention_mask", "position_ids"] + [
        f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    example = [torch.randint(0, 100, (1, new)), torch.ones(1, past + new, dtype=torch.long),
               torch.arange(past, past + new)[None]]
    example += [torch.randn(1, kv_heads, past, head) for _ in range(2 * layers)]
    shapes = [ov.PartialShape([-1, -1])] * 3 + \
        [ov.PartialShape([-1, kv_heads, -1, head])] * (2 * layers)
    try:   # the tracer's warnings on transformers' branches: the wrapper fixes those it needs
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            traced = ov.convert_model(_wrapper(model, torch), example_input=tuple(example),
                                      input=shapes)
    except (RuntimeError, TypeError, ValueError) as exc:   # the converter's, on this model
        said = " ".join(str(exc).split("Tensor:")[0].split())[:400]
        raise ModelError(f"OpenVINO's converter could not trace this model with its KV "
                         f"cache ({type(model).__name__}): {said}") from None
    outputs = ["logits"] + [f"present.{name.split('.', 1)[1]}" for name in names[3:]]
    for port, name in [*zip(traced.inputs, names), *zip(traced.outputs, outputs)]:
        port.get_tensor().set_names({name})
    return traced, dict(zip(names[3:], outputs[1:]))


def _stateful(traced, cache: dict, ov) -> None:
    """The cache made the model's state, as OpenVINO GenAI runs it: a beam_idx input
    reordering it, its inputs and outputs turned into variables that start empty."""
    from openvino import opset13 as ops
    from openvino._offline_transformations import apply_make_stateful_transformation
    beam = ops.parameter(name="beam_idx", dtype=ov.Type.i32, shape=ov.PartialShape([-1]))
    beam.output(0).get_tensor().add_names({"beam_idx"})
    traced.add_parameters([beam])
    for name in cache:
        port = traced.input(name)
        users = port.get_target_inputs()
        gathered = ops.gather(port, beam, ops.constant(0))
        for user in users:
            user.replace_source_output(gathered.output(0))
    traced.validate_nodes_and_infer_types()
    apply_make_stateful_transformation(traced, cache)
    batch = ops.gather(ops.shape_of(traced.input("input_ids"), output_type="i64"),
                       ops.constant([0]), ops.constant(0))
    for op in traced.get_ops():
        if op.get_type_name() == "ReadValue":   # zeros of [batch, heads, 0, head size]
            dims = [d.min_length for d in op.get_output_partial_shape(0)]
            parts = [batch] + [ops.constant([d]) for d in dims[1:]]
            op.set_arguments([ops.broadcast(ops.constant(0.0, dtype=op.get_output_element_type(0)),
                                            ops.concat(parts, 0))])
    traced.validate_nodes_and_infer_types()


def _compressed(ir, config: ExportOVGenai, calibration):
    """NNCF's weight compression of the IR, on the `calibration` ids where it needs data."""
    import numpy as np
    nncf = require("nncf", "export.ovgenai's weight compression")
    modes = {"int8": "INT8_ASYM", "int4": "INT4_SYM" if config.symmetric else "INT4_ASYM"}
    options = {"mode": nncf.CompressWeightsMode[modes[config.weights]]}
    if config.weights == "int4":
        options.update(group_size=config.group_size, ratio=config.ratio,
                       all_layers=config.all_layers, awq=config.awq,
                       scale_estimation=config.scale_estimation, gptq=config.gptq)
    if config.data_aware():
        ids, width = list(calibration), config.calibration_window
        windows = [np.asarray([ids[k:k + width]], np.int64)
                   for k in range(0, len(ids) - width + 1, width)]
        options.update(subset_size=len(windows), dataset=nncf.Dataset([
            {"input_ids": w, "attention_mask": np.ones_like(w), "beam_idx": np.zeros(1, np.int32),
             "position_ids": np.arange(width, dtype=np.int64)[None]} for w in windows]))
    nncf.set_log_level(logging.WARNING)   # its tables per call; the meta records the settings
    return nncf.compress_weights(ir, **options)


def build_folder(source, folder, config: ExportOVGenai, calibration=(), task=None) -> dict:
    """The OpenVINO GenAI folder of the Hugging Face model at `source`, its weights as
    `config` says (`calibration`: the ids NNCF's data-aware options read; `task(label)`: a
    context for each long step); the meta it records."""
    import contextlib
    task = task or (lambda label: contextlib.nullcontext())
    torch = require("torch", "export.ovgenai")
    ov = require("openvino", "export.ovgenai")
    require("openvino_genai", "export.ovgenai")
    tokenizers = require("openvino_tokenizers", "export.ovgenai")
    transformers = require("transformers", "export.ovgenai")
    with task("export.ovgenai: tracing the model with its KV cache (openvino.convert_model)"):
        model = transformers.AutoModelForCausalLM.from_pretrained(
            source, dtype=torch.float32, attn_implementation="sdpa").eval()
        ir, cache = _traced(model, ov, torch)
        _stateful(ir, cache, ov)
    meta = {"converter": f"openvino {ov.__version__}"}
    if config.weights != "float":
        data = "on the calibration ids" if config.data_aware() else "without data"
        with task(f"NNCF {config.weights} weight compression ({data})"):
            ir = _compressed(ir, config, calibration)
        meta["nncf"] = {"weights": config.weights, "data": config.data_aware(),
                        **(config.model_dump(include=set(INT4_SETTINGS))
                           if config.weights == "int4" else {})}
    folder.mkdir(parents=True)
    ov.save_model(ir, folder / "openvino_model.xml", compress_to_fp16=False)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    for name, made in zip(("openvino_tokenizer", "openvino_detokenizer"),
                          tokenizers.convert_tokenizer(hf_tokenizer, with_detokenizer=True)):
        ov.save_model(made, folder / f"{name}.xml")
    for name in _KEPT:
        if (source / name).is_file():
            shutil.copy(source / name, folder / name)
    return meta


@register(ExportOVGenai)
def run(artifact, config: ExportOVGenai, ctx) -> list[Output]:
    folder = ctx.out_dir / "model"
    calibration = ctx.lm_text().calibration if config.data_aware() else ()
    meta = build_folder(ctx.path(artifact), folder, config, calibration,
                        lambda label: ctx.progress.task(label, None))
    if config.weights == "float":
        meta["parity"] = parity(ctx, folder, config)
    precision = {"float": "fp32"}.get(config.weights, config.weights)
    return [Output(folder, "ovgenai", precision, meta)]
