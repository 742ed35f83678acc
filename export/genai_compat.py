"""onnxruntime-genai's model builder, run with the RoPE settings in the form it reads.

transformers 5 keeps a model's RoPE settings per attention type when they differ (Gemma 3:
`rope_parameters: {full_attention: {rope_theta: 1e6}, sliding_attention: {rope_theta:
1e4}}`); the builder 0.18 reads Gemma 3's in transformers 4's form (`rope_theta`,
`rope_local_base_freq`, one flat `rope_parameters`) and stops with KeyError 'rope_type'.
This script gives it that form, the same numbers, and then runs the builder's own command
line unchanged. export/genai.py runs it (as its own process, as the builder itself runs)
only for a config whose RoPE settings are kept per attention type; the export's parity
with torch is measured (make slm-parity SLM_ARGS="--model gemma3-270m").

    python -m export.genai_compat -i HF_DIR -o OUT -p fp32 -e cpu ...   (the builder's options)
"""
from __future__ import annotations

import runpy

# the attention types whose settings become the builder's global and local RoPE
GLOBAL, LOCAL = "full_attention", "sliding_attention"


def per_attention_type(rope) -> bool:
    """Whether RoPE settings are kept per attention type (transformers 5's form)."""
    return isinstance(rope, dict) and "rope_type" not in rope and {GLOBAL, LOCAL} <= set(rope)


def flattened(config):
    """`config` with per-attention-type RoPE settings in transformers 4's form."""
    rope = getattr(config, "rope_parameters", None)
    if per_attention_type(rope):
        config.rope_theta = rope[GLOBAL]["rope_theta"]
        config.rope_local_base_freq = rope[LOCAL]["rope_theta"]
        config.rope_parameters = dict(rope[GLOBAL])
    return config


def main() -> None:
    import transformers
    load = transformers.AutoConfig.from_pretrained   # bound to AutoConfig
    transformers.AutoConfig.from_pretrained = lambda *a, **k: flattened(load(*a, **k))
    runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
