"""More points of a language model's speed than the profile's own (benchmark `sweep:`):
each prompt length x threads asked for, measured like the profile's point (fresh
processes, the variants in turn within each round, the same place and accelerator), and
kept in the record's `language_model.sweep`. Budgets are judged at the profile's point
only; the sweep shows how speed and memory move with the prompt and the threads.

    sweep: {prompt_tokens: [32, 512], threads: [1, 2]}
"""
from __future__ import annotations

from itertools import product

from pydantic import Field, PositiveInt

from compress.errors import DataError
from compress.stagebase import Strict


class LMSweep(Strict):
    prompt_tokens: tuple[PositiveInt, ...] = Field(
        (), description="prompt lengths (default: the profile's language_model.prompt_tokens)")
    threads: tuple[PositiveInt, ...] = Field(
        (), description="threads (default: the target's)")

    def points(self, prompt_tokens: int, threads: int) -> list[tuple[int, int]]:
        """(prompt tokens, threads) asked for besides the profile's own point."""
        return [point for point in product(self.prompt_tokens or (prompt_tokens,),
                                           self.threads or (threads,))
                if point != (prompt_tokens, threads)]


def sweep_point(speed: dict, prompt_tokens: int, threads: int) -> dict:
    """One point of the sweep, as the record keeps it."""
    return {"prompt_tokens": prompt_tokens, "threads": threads,
            "decode_tok_s": speed["decode_tok_s"], "prefill_tok_s": speed["prefill_tok_s"],
            "ttft_ms": speed["ttft_s"] * 1000, "peak_rss_mb": speed["peak_rss_mb"],
            "noisy": speed["noisy"]}


def check_prompts(sweep: LMSweep | None, evaluation_ids: int) -> None:
    """A prompt is cut from the evaluation ids: none may be longer than they are."""
    longest = max(sweep.prompt_tokens, default=0) if sweep else 0
    if longest > evaluation_ids:
        raise DataError(f"benchmark sweep: a prompt of {longest} tokens is longer than the "
                        f"{evaluation_ids} evaluation ids it is cut from: raise "
                        "data.text.evaluation_tokens or shorten the prompt")
