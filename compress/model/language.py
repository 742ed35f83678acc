"""What the wings above ask of a language model the pipeline starts from, in one place,
so that none of them names its source field: is it readable before any work, and
(loaded from Python) does it come with a tokenizer."""
from __future__ import annotations


def check_given(pipeline, objects: bool = False) -> None:
    """The language model in `model:` checked before any work: a path must be a model
    the pipeline starts from; with `objects`, a model given from Python must have its
    tokenizer found now, not after the source stage. Nothing for another kind."""
    from compress.model import causal_lm
    given = pipeline.model.causal_lm
    if isinstance(given, str):
        causal_lm.check_pipeline_source(pipeline.resolve(given))
    elif given is not None and objects:
        causal_lm.model_and_tokenizer(given)
