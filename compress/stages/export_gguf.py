"""`export.gguf`: a causal language model given as a GGUF file -> that model in float32
GGUF (every tensor dequantized by the `gguf` package, its metadata and tokenizer kept),
the file llama.cpp's own types are made from, checked against torch on llama.cpp as
export.genai checks its folder."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveInt

from compress.core.artifacts import Output
from compress.core.lazy import require
from compress.errors import ModelError
from compress.stagebase import StageConfig, register


class ExportGguf(StageConfig):
    type: Literal["export.gguf"] = Field(
        "export.gguf", description="a causal language model given as a .gguf file to a "
        "float32 GGUF for llama.cpp, checked against torch")
    parity_tokens: PositiveInt = Field(512, description="tokens of the evaluation text "
                                       "compared with torch")
    max_perplexity_change: NonNegativeFloat = Field(
        0.001, description="relative perplexity difference from torch allowed")
    generated_tokens: PositiveInt = Field(16, description="greedy tokens compared with "
                                          "torch on each prompt of data.text.prompts")

    def formats(self) -> dict[str, str]:
        return {"causal_lm": "gguf"}

    def format_hint(self, given: str) -> str:
        return "export.gguf takes model.causal_lm, the model as given (`input: source`)"


@register(ExportGguf)
def run(artifact, config: ExportGguf, ctx) -> list[Output]:
    from export.gguf import GGUFExportError, float_gguf
    from compress.stages.export_genai import parity
    require("gguf", "export.gguf")
    require("llama_cpp", "export.gguf (llama.cpp runs it: make llama-cpp)")
    given = ctx.pipeline.model.causal_lm
    if not isinstance(given, str) or not given.endswith(".gguf"):
        raise ModelError("export.gguf writes the model as given in float32 GGUF: give "
                         "model.causal_lm as a .gguf file (llama.cpp's convert_hf_to_gguf.py "
                         "makes one from a Hugging Face folder)")
    path = ctx.out_dir / "model.gguf"
    try:
        float_gguf(ctx.pipeline.resolve(given), path)
    except GGUFExportError as exc:
        raise ModelError(str(exc)) from None
    checked = parity(ctx, path, config)
    ctx.progress.note(f"export.gguf: perplexity {checked['perplexity_increase']:+.4%} from "
                      f"torch on llama.cpp, top-1 agreement {checked['top1_agreement']:.4f}")
    return [Output(path, "gguf", "fp32", {"parity": checked})]
