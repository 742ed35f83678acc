"""`make conformance-lm`: the language models of the corpus (SmolLM2-135M, a Llama; Gemma 3
270M, a second architecture with sliding-window layers, after `make gemma3`) through the
pipeline and, in the same run on the same token ids, what a user would do by hand:
onnxruntime-genai's model builder at INT4 with its defaults
(`python -m onnxruntime_genai.models.builder -p int4`).

For each model: export.genai (the stage itself fails unless the export is within 0.1%
perplexity of torch and picks the same greedy tokens), INT8 weight-only, and the measured
mix for a quality budget (mean KL <= 0.1, perplexity <= +5%); then the builder's INT4 by
hand, scored by the same code against the same float export. Writes
docs/conformance_lm.md and .json; exits 1 when a check fails: the export out of parity,
INT8 over +1% perplexity, or the pipeline's INT4 (the mix) not closer to the float model
(mean KL) than the builder's INT4 by hand. A model whose package is not installed is
left out, saying how to install it.

    python examples/conformance/language_models.py [--only smollm2-135m] [--tokens 1024]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "slm"))

from slm_models import MODELS  # noqa: E402

import compress  # noqa: E402

OUT, DOCS = ROOT / "runs" / "conformance-lm", ROOT / "docs"
BUDGET = {"kl": 0.1, "perplexity": 0.05}


def _pipeline(name: str, gguf: Path, tokens: int) -> dict:
    return {"name": name, "output": str(OUT), "model": {"causal_lm": str(gguf)},
            "data": {"text": {"python_docs": True, "evaluation_tokens": tokens,
                              "calibration_tokens": 128, "prompts": ["def fibonacci(n):"]}},
            "stages": [{"type": "export.genai", "name": "float"},
                       {"type": "quantize", "scheme": "lm-weight-only", "bits": 8,
                        "input": "float", "name": "int8"},
                       {"type": "quantize", "scheme": "lm-weight-only", "bits": 4,
                        "input": "float", "name": "int4-mix", "mix": BUDGET},
                       {"type": "benchmark", "rounds": 1, "new_tokens": 32}],
            "targets": [{"profile": "host-cpu", "gate": False}]}


def _by_hand(run_dir: Path, tokens: int, window: int) -> dict:
    """The builder's INT4 defaults from the same model as given, scored against the
    pipeline's float export on the pipeline's evaluation ids."""
    from compress.data.text import python_docs_text
    from compress.model.causal_lm import token_ids
    from compress.quant.lm.genai_route import GenaiRoute
    from export.genai import build_genai
    from runtimes.lm.genai import folder_bytes
    source, exported = run_dir / "00-source" / "model", run_dir / "01-float" / "model"
    out = OUT / f"{run_dir.name}-builder-int4"
    started = time.perf_counter()
    build_genai(source, out, "int4")
    seconds = time.perf_counter() - started
    route = GenaiRoute(source, exported)
    ids = token_ids(source, python_docs_text(), limit=tokens + 1)
    quality = route.score(out, route.reference(ids, window)).as_dict()
    return {"weights_mib": folder_bytes(out) / 2**20, "quantize_s": seconds, **quality}


def _row(bench: dict, artifact) -> dict:
    metric = bench["metric"]
    return {"weights_mib": bench["size_bytes"] / 2**20, "perplexity": metric["value"],
            "perplexity_increase": metric["drop"], "kl_mean": metric["kl_mean"],
            "top1_agreement": metric["top1_agreement"],
            "decode_tok_s": bench["language_model"]["decode_tok_s"],
            "quantize_s": (artifact.meta.get("mix") or artifact.meta).get("seconds")
            if artifact else None}


def run_model(name: str, tokens: int) -> dict:
    model = MODELS[name]
    gguf = model.gguf(OUT / "models")
    started = time.perf_counter()
    result = compress.run(_pipeline(name, gguf, tokens))
    artifacts = {a.id: a for a in result.artifacts}
    rows = {b["artifact"]: _row(b, artifacts.get(b["artifact"])) for b in result.benchmarks}
    rows["builder INT4 by hand"] = _by_hand(result.run_dir, tokens, 512)
    mix = artifacts["int4-mix"].meta["mix"]
    checks = {"export within 0.1% of torch":
              abs(artifacts["float"].meta["parity"]["perplexity_increase"]) <= 0.001,
              "INT8 within +1% perplexity": rows["int8"]["perplexity_increase"] <= 0.01,
              "the mix closer to float (KL) than the builder's INT4":
              rows["int4-mix"]["kl_mean"] < rows["builder INT4 by hand"]["kl_mean"]}
    return {"model": model.title, "gguf": gguf.name, "rows": rows, "checks": checks,
            "mix_high": f"{sum(w == mix['high'] for w in mix['bits'].values())} of "
                        f"{len(mix['bits'])}",
            "seconds": time.perf_counter() - started}


def render(results: list[dict], tokens: int) -> str:
    lines = ["# Conformance corpus: language models", "",
             "Written by `make conformance-lm` (examples/conformance/language_models.py): "
             f"each model through the pipeline and, on the same {tokens} evaluation ids of "
             "English text that ships with Python, onnxruntime-genai's builder INT4 with its "
             f"defaults by hand. The mix's budget: mean KL <= {BUDGET['kl']}, perplexity "
             f"<= +{BUDGET['perplexity']:.0%}. Decode: 2 threads, one round of 32 tokens "
             "(an indication, not a benchmark).", ""]
    for r in results:
        lines += [f"## {r['model']} ({r['gguf']}, {r['seconds'] / 60:.1f} min)", "",
                  "| file | weights MiB | perplexity | change | mean KL | top-1 | decode tok/s |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for label, row in r["rows"].items():
            decode = f"{row['decode_tok_s']:.1f}" if row.get("decode_tok_s") else "—"
            lines.append(f"| {label} | {row['weights_mib']:.1f} | {row['perplexity']:.3f} | "
                         f"{row['perplexity_increase']:+.2%} | {row['kl_mean']:.4f} | "
                         f"{row['top1_agreement']:.3f} | {decode} |")
        lines += ["", f"The mix keeps {r['mix_high']} units at INT8.", ""]
        lines += [f"- {'pass' if ok else '**FAIL**'}: {check}" for check, ok in r["checks"].items()]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--tokens", type=int, default=1024)
    args = parser.parse_args()
    results = []
    for name in args.only:
        if MODELS[name].find(OUT / "models") is None:
            print(f"{name}: left out, {MODELS[name].package} is not installed "
                  f"({MODELS[name].install})")
            continue
        results.append(run_model(name, args.tokens))
    (DOCS / "conformance_lm.json").write_text(json.dumps(results, indent=1, default=str))
    (DOCS / "conformance_lm.md").write_text(render(results, args.tokens))
    failed = [(r["model"], c) for r in results for c, ok in r["checks"].items() if not ok]
    for model, check in failed:
        print(f"FAIL {model}: {check}")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
