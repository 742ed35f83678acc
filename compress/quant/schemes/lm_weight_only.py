"""lm-weight-only: a causal language model's weights at 8 or 4 bits (onnxruntime's
MatMulNBits through onnxruntime-genai's model builder), activations float; optionally
a measured mix of widths (`mix:`), the layers that cost the most kept at 8 bits until a
quality budget holds. Its settings and its registration."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, NonNegativeFloat, PositiveFloat, model_validator

from compress.quant.schemes.base import FromTorch, QuantizeBase
from compress.quant.schemes.registry import register_scheme
from compress.stagebase import Strict


class LMMix(Strict):
    """The measured mix: each unit alone at 4 bits scored against the float model on the
    calibration text, then the costliest per weight at 8 bits, as few as meet every limit
    given on the evaluation text."""
    kl: Optional[NonNegativeFloat] = Field(
        None, description="mean KL divergence from the float model at most (nats per "
        "token): steadier than perplexity, which can fall while the model drifts")
    perplexity: Optional[NonNegativeFloat] = Field(
        None, description="relative perplexity increase at most (0.05: +5%)")
    size_mb: Optional[PositiveFloat] = Field(
        None, description="the weights' file at most this many MiB; alone: the most layers "
        "kept high that fit it (the best quality at that size)")
    targets: bool = Field(
        False, description="the limits are the tightest kl_mean, perplexity_increase and "
        "model_size_mb of the targets' language_model budgets")
    granularity: Literal["layer", "matmul"] = Field(
        "layer", description="a unit: every MatMul of a transformer layer, or each MatMul")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value):
        return {"targets": True} if value == "targets" else value   # `mix: targets`

    @model_validator(mode="after")
    def _some_limit(self):
        given = [v for v in (self.kl, self.perplexity, self.size_mb) if v is not None]
        if self.targets and given:
            raise ValueError("mix: give limits (kl, perplexity, size_mb) or `targets: true`, "
                             "not both")
        if not self.targets and not given:
            raise ValueError("mix needs a limit: `kl: 0.1`, `perplexity: 0.05`, `size_mb: "
                             "100`, several, or `mix: targets` (the targets' language_model "
                             "budgets)")
        return self

    def limits(self) -> dict[str, float]:
        """{quality measure (kl_mean, perplexity_increase): its limit}."""
        return {key: value for key, value in (("kl_mean", self.kl),
                                              ("perplexity_increase", self.perplexity),
                                              ("megabytes", self.size_mb))
                if value is not None}

    def from_targets(self, targets: list) -> "LMMix":
        """The limits the targets' profiles set ([(name, Profile)]), the tightest each."""
        found = {}
        for key, setting in (("kl_mean", "kl"), ("perplexity_increase", "perplexity"),
                             ("model_size_mb", "size_mb")):
            given = [getattr(p.language_model, key) for _, p in targets
                     if getattr(p.language_model, key) is not None]
            if given:
                found[setting] = min(given)
        if not found:
            raise ValueError("mix: targets needs a target profile with language_model."
                             "kl_mean, perplexity_increase or model_size_mb; give `kl:`, "
                             "`perplexity:` or `size_mb:`")
        return LMMix(**found, granularity=self.granularity)


class WithMix(FromTorch, QuantizeBase):
    """A language model's scheme with a measured mix (`mix:`): no export preset applies
    (those are for tensor models), and `mix: targets` takes the targets' limits."""
    mix: Optional[LMMix] = None

    def for_targets(self, targets: list):
        if self.mix is None or not self.mix.targets:
            return self
        return self.model_copy(update={"mix": self.mix.from_targets(targets)})


class LMWeightOnly(WithMix):
    # 6: the mix records its widths by name (INT4, INT8) and its low and high width
    cache_version = 6
    scheme: Literal["lm-weight-only"] = Field(
        "lm-weight-only", description="lm-weight-only: a causal language model's weights at 8 "
        "or 4 bits through onnxruntime-genai's builder (an export.genai artifact)")
    bits: Literal[4, 8] = Field(4, description="the weights' width")
    method: Literal["default", "rtn", "k_quant", "k_quant_mixed", "gptq"] = Field(
        "default", description="the builder's method: default (round to nearest, MLAS), rtn, "
        "k_quant (a scale searched per block), k_quant_mixed (its fixed recipe: some layers "
        "at 8 bits); with `mix:`, the base method of every width (not k_quant_mixed); gptq: "
        "neural-compressor's GPTQ on data.text's calibration ids (bits 4, no mix)")
    block_size: Literal[16, 32, 64, 128, 256] = Field(32, description="weights per scale")
    symmetric: bool = Field(True, description="blocks without a zero point (the builder's "
                            "default)")
    mix: Optional[LMMix] = Field(None, description="a measured mix of 4 and 8 bits (bits: 4)")

    @model_validator(mode="after")
    def _mix_fits(self):
        if self.mix is not None and self.bits != 4:
            raise ValueError("mix: chooses which layers stay at 8 bits among 4-bit ones: "
                             "set bits: 4")
        if self.mix is not None and self.method == "k_quant_mixed":
            raise ValueError("mix: measures its own mix; k_quant_mixed is the builder's fixed "
                             "one: use method default, rtn or k_quant")
        if self.bits == 8 and self.method in ("k_quant_mixed", "gptq"):
            raise ValueError(f"method {self.method} makes 4-bit weights: set bits: 4")
        if self.mix is not None and self.method == "gptq":
            raise ValueError("mix: measures the builder's methods (default, rtn, k_quant); "
                             "gptq makes one width: leave mix out")
        return self

    def formats(self) -> dict[str, str]:
        return {"genai": "genai"}

    def format_hint(self, given: str) -> str:
        return "lm-weight-only takes the export.genai stage's float model"


def _lm(artifact, config, ctx):
    from compress.quant.lm.stage import quantize_lm
    return quantize_lm(artifact, config, ctx)


register_scheme(LMWeightOnly, "int4", 7, lm=_lm)(None)
