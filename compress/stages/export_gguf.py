"""`export.gguf`: a causal language model given as a GGUF file -> that model in float32
GGUF (every tensor dequantized by the `gguf` package, its metadata and tokenizer kept),
the file llama.cpp's own types are made from, checked against torch on llama.cpp as
export.genai checks its folder."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from compress.core.artifacts import Output
from compress.core.lazy import require
from compress.errors import ModelError
from compress.stagebase import register
from compress.stages.export_genai import LMExport, parity


class ExportGguf(LMExport):
    type: Literal["export.gguf"] = Field(
        "export.gguf", description="a causal language model given as a .gguf file to a "
        "float32 GGUF for llama.cpp, checked against torch")

    def formats(self) -> dict[str, str]:
        return {"causal_lm": "gguf"}

    def format_hint(self, given: str) -> str:
        return "export.gguf takes model.causal_lm, the model as given (`input: source`)"


@register(ExportGguf)
def run(artifact, config: ExportGguf, ctx) -> list[Output]:
    from export.gguf import GGUFExportError, float_gguf
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
