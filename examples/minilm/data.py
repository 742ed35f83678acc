"""Calibration and evaluation data for the MiniLM example: the sentences of sentences.py,
tokenized with the model's own tokenizer (WordPiece, lower-cased) to exactly 128 tokens.

- evaluation(): the 264 paired sentences in pair order (rows 2i and 2i+1 are pair i), so
  the pair similarities of any variant can be compared with the original model's.
- calibration(): 96 other sentences, none of them in the evaluation set.

No labels: quality is fidelity to the FP32 torch model (mean cosine of the embeddings).
"""
from model import SEQUENCE_LENGTH, tokenize
from sentences import CALIBRATION, evaluation_sentences


def calibration(length: int = SEQUENCE_LENGTH) -> dict:
    return tokenize(CALIBRATION, length)


def evaluation(length: int = SEQUENCE_LENGTH) -> dict:
    return tokenize(evaluation_sentences(), length)
