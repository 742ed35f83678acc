"""A language model's text made into token ids once, with the model's own tokenizer, so
every format and engine is scored on the same ids: the first `evaluation_tokens` (+1, the
last one predicted) for perplexity, KL and top-1 agreement; the last
`calibration_tokens` (+1), apart from them, to rank layers on; the prompts' ids."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from compress.data.text import text_sha256
from compress.errors import DataError
from compress.model.causal_lm import token_ids, tokenizer_sha256


@dataclass(frozen=True)
class TokenizedText:
    label: str                       # where the text came from
    evaluation: tuple[int, ...]
    calibration: tuple[int, ...]
    prompts: tuple[tuple[int, ...], ...]
    window: int
    text_sha256: str
    tokenizer_sha256: str

    def record(self) -> dict:
        """What the report says of the text (the ids themselves stay out)."""
        return {"text": self.label, "text_sha256": self.text_sha256,
                "tokenizer_sha256": self.tokenizer_sha256,
                "evaluation_tokens": len(self.evaluation) - 1,
                "calibration_tokens": len(self.calibration) - 1, "window": self.window,
                "prompts": len(self.prompts)}


def tokenize(spec, folder: Path, text: str) -> TokenizedText:
    """`text`, read as `spec` (config.data.TextData) says, in the tokenizer of the Hugging
    Face `folder`."""
    ids = token_ids(folder, text)
    needed = spec.evaluation_tokens + spec.calibration_tokens + 2
    if len(ids) < needed:
        raise DataError(f"data.text ({spec.label}) makes {len(ids)} tokens, fewer than "
                        f"evaluation_tokens + calibration_tokens + 2 = {needed}: give more "
                        "text or lower them")
    prompts = tuple(tuple(token_ids(folder, prompt)) for prompt in spec.prompts)
    if any(not prompt for prompt in prompts):
        raise DataError("data.text.prompts: a prompt makes no token; remove the empty one")
    return TokenizedText(spec.label, tuple(ids[:spec.evaluation_tokens + 1]),
                         tuple(ids[-(spec.calibration_tokens + 1):]), prompts, spec.window,
                         text_sha256(text), tokenizer_sha256(folder))
