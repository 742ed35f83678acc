"""`export.genai`: a causal language model (Hugging Face weights) -> an onnxruntime-genai
folder with its KV cache, made by onnxruntime-genai's own model builder, then checked
against torch on the evaluation text: perplexity within `max_perplexity_change` and the
same greedy tokens on the prompts."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveInt

from compress.core.artifacts import Output
from compress.core.lazy import require
from compress.errors import ModelError
from compress.stagebase import StageConfig, register


class LMExport(StageConfig):
    """What a language model's export stages share: how closely the export must match
    torch on the evaluation text and the prompts (parity() below checks it)."""
    parity_tokens: PositiveInt = Field(
        512, description="tokens of the evaluation text compared with torch (at most "
        "data.text.evaluation_tokens)")
    max_perplexity_change: NonNegativeFloat = Field(
        0.001, description="the export's perplexity may differ from torch's by this much "
        "(relative: 0.001 is 0.1%)")
    generated_tokens: PositiveInt = Field(16, description="greedy tokens compared with "
                                          "torch on each prompt of data.text.prompts")


class ExportGenai(LMExport):
    type: Literal["export.genai"] = Field(
        "export.genai", description="a causal language model to an onnxruntime-genai folder "
        "(ONNX with its KV cache), checked against torch")
    precision: Literal["fp32"] = Field(
        "fp32", description="the weights' precision (fp32 for the CPU; the quantize stage's "
        "lm-weight-only scheme makes INT8/INT4)")

    def formats(self) -> dict[str, str]:
        return {"causal_lm": "genai"}

    def format_hint(self, given: str) -> str:
        return "export.genai takes model.causal_lm, the model as given (`input: source`)"


def parity(ctx, path, config: LMExport) -> dict:
    """Torch against the export at `path` (a folder or a file of runtimes.formats) on
    the first `parity_tokens` evaluation ids, and greedy generations on the prompts;
    ModelError past the limits (`config`: an export stage's settings)."""
    from compress.model.causal_lm import TorchLM
    from runtimes.lm.engines import for_path
    from runtimes.lm.quality import Reference
    text = ctx.lm_text()
    ids = list(text.evaluation[:config.parity_tokens + 1])
    torch_lm = TorchLM(ctx.path(ctx.source_artifact))
    longest = max([len(ids), *(len(p) + config.generated_tokens for p in text.prompts)])
    export = for_path(path)[1].open(path, 2, all_logits=True, context=longest + 1)
    quality = Reference(torch_lm.logits, ids, text.window).score(export.logits).as_dict()
    change = quality["perplexity_increase"]
    if abs(change) > config.max_perplexity_change:
        raise ModelError(f"the export's perplexity differs from torch's by {change:+.3%} on "
                         f"{quality['tokens']} tokens (allowed ±{config.max_perplexity_change:.2%})"
                         f": the model builder did not reproduce this architecture")
    for n, prompt in enumerate(text.prompts):
        expected = torch_lm.greedy(list(prompt), config.generated_tokens)
        got = export.greedy(list(prompt), len(expected))
        if got != expected:
            raise ModelError(f"prompt {n + 1}: the export generates {got[:8]}... where torch "
                             f"generates {expected[:8]}... (greedy)")
    return {**quality, "prompts_identical": len(text.prompts)}


@register(ExportGenai)
def run(artifact, config: ExportGenai, ctx) -> list[Output]:
    require("onnxruntime", "export.genai")   # first: onnxruntime-genai finds it loaded
    require("onnxruntime_genai", "export.genai")
    require("transformers", "export.genai")
    from export.genai import BuildFailed, build_genai
    folder = ctx.out_dir / "model"
    ctx.progress.note(f"building the {config.precision} onnxruntime-genai model "
                      "(onnxruntime-genai's model builder)")
    try:
        build_genai(ctx.path(artifact), folder, config.precision)
    except BuildFailed as exc:
        raise ModelError(str(exc)) from None
    checked = parity(ctx, folder, config)
    ctx.progress.note(f"export.genai: perplexity {checked['perplexity_increase']:+.4%} from "
                      f"torch, top-1 agreement {checked['top1_agreement']:.4f}")
    return [Output(folder, "genai", config.precision, {"parity": checked,
                                                       "builder": _builder_version()})]


def _builder_version() -> str:
    from importlib.metadata import version
    return f"onnxruntime-genai {version('onnxruntime-genai')}"
