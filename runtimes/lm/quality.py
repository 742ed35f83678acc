"""A language model's quality on text, from its next-token logits, with numpy only (runs
on the device): perplexity, and against a reference model's logits on the same token ids
the mean KL divergence and the top-1 next-token agreement.

Text is scored in windows: each window of token ids is one model call from an empty
cache, predicting ids[1:] from ids[:-1]. Consecutive windows overlap by one id so every
token after the first is predicted exactly once. Every format and engine is scored on the
same windows of the same ids, so their figures compare.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np


def windows(ids: list[int], length: int) -> list[list[int]]:
    """`ids` cut into windows of at most `length` + 1 ids (the model sees `length`,
    predicts the `length` after each), overlapping by one: each id after the first is a
    target once."""
    if length < 1:
        raise ValueError(f"a window holds at least one predicted token, not {length}")
    return [ids[start:start + length + 1] for start in range(0, len(ids) - 1, length)]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log p over the last axis, in float64 (a 50k-word vocabulary sums many small terms)."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@dataclass
class Tally:
    """Sums over the windows scored so far; `result()` turns them into a TextQuality."""
    nll: float = 0.0
    tokens: int = 0
    kl: float = 0.0
    agree: int = 0
    compared: int = 0
    reference_nll: float = 0.0

    def add(self, logits: np.ndarray, targets: list[int],
            reference: np.ndarray | None = None) -> None:
        """One window: `logits` [n, vocab] predicting `targets` (n ids); `reference`: the
        reference model's logits on the same window."""
        logp = log_softmax(logits)
        rows = np.arange(len(targets))
        self.nll -= float(logp[rows, targets].sum())
        self.tokens += len(targets)
        if reference is None:
            return
        ref = log_softmax(reference)
        self.reference_nll -= float(ref[rows, targets].sum())
        self.kl += float((np.exp(ref) * (ref - logp)).sum())
        self.agree += int((ref.argmax(-1) == logp.argmax(-1)).sum())
        self.compared += len(targets)

    def result(self) -> "TextQuality":
        if not self.tokens:
            raise ValueError("no token was scored: the text is shorter than two tokens")
        quality = TextQuality(perplexity=math.exp(self.nll / self.tokens), tokens=self.tokens)
        if self.compared:
            reference = math.exp(self.reference_nll / self.compared)
            quality.against = {
                "reference_perplexity": reference,
                "perplexity_increase": quality.perplexity / reference - 1,
                "kl_mean": self.kl / self.compared,
                "top1_agreement": self.agree / self.compared}
        return quality


@dataclass
class TextQuality:
    """Perplexity on `tokens` predicted tokens; `against`, where a reference was scored on
    the same windows: its perplexity, the relative increase, mean KL(reference || this)
    in nats per token, and the share of tokens whose most likely next token is the same."""
    perplexity: float
    tokens: int
    against: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"perplexity": self.perplexity, "tokens": self.tokens, **self.against}


Logits = Callable[[list], np.ndarray]   # token ids -> next-token logits [len(ids), vocab]


def score_text(logits_of: Logits, ids: list[int], window: int,
               reference_of: Optional[Logits] = None) -> TextQuality:
    """`logits_of`'s quality on `ids`, window by window; with `reference_of` (the float
    model's logits, computed window by window: a whole text's logits do not fit memory,
    2,048 tokens of a 49k vocabulary are 400 MB) also against it."""
    tally = Tally()
    for chunk in windows(ids, window):
        inputs = chunk[:-1]
        tally.add(logits_of(inputs), chunk[1:],
                  reference_of(inputs) if reference_of else None)
    return tally.result()


class Reference:
    """The float model's logits on fixed windows of token ids, computed once: each
    variant scored against it runs only itself (a search scores many). Holds
    windows x window x vocab floats (512 ids of a 49k vocabulary: 100 MB a window)."""

    def __init__(self, logits_of: Logits, ids: list[int], window: int):
        self.windows = windows(ids, window)
        self.logits = [logits_of(chunk[:-1]) for chunk in self.windows]

    def score(self, logits_of: Logits) -> TextQuality:
        tally = Tally()
        for chunk, reference in zip(self.windows, self.logits):
            tally.add(logits_of(chunk[:-1]), chunk[1:], reference)
        return tally.result()
