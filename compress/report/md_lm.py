"""report.md's parts for a causal language model: its benchmark table (tokens/s, time to
first token, memory apart, quality against the float export on the same token ids) and
the measured mix of widths (which layers got which bits, and what each choice cost)."""
from __future__ import annotations

from compress.report.mdtext import fmt, md


def is_language_model(report: dict) -> bool:
    return any(b.get("language_model") for b in report["benchmarks"])


def _quality(m: dict) -> str:
    greedy = m.get("greedy_agreement")
    return (f"{m['value']:.4f} | {m['drop']:+.2%} | {m['kl_mean']:.4f} | "
            f"{m['top1_agreement']:.4f} | {fmt(greedy, 3) if greedy is not None else '—'}")


def lm_benchmark_table(report: dict) -> list[str]:
    lines = ["| target | artifact | decode tok/s | ms per token p50 / p90 | prefill tok/s | "
             "time to first token ms | load s | peak MB (base) | weights MB | KV cache MB "
             "(context) | perplexity | change | KL | top-1 | greedy |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    noisy = []
    for b in report["benchmarks"]:
        lm, lat = b["language_model"], b["latency_ms"]
        name = md(b["artifact"]) + (" (baseline)" if b["baseline"] else "")
        lines.append(
            f"| {md(b['target'])} | {name} | {lm['decode_tok_s']:.1f} | {lat['p50']:.2f} / "
            f"{lat['p90']:.2f} | {lm['prefill_tok_s']:.0f} | {lm['ttft_ms']:.1f} | "
            f"{lm['load_s']:.2f} | {b['peak_memory_mb']:.0f} ({b['idle_memory_mb']:.0f}) | "
            f"{lm['weights_bytes'] / 2**20:.1f} | {lm['kv_cache_bytes'] / 2**20:.1f} "
            f"({lm['context_tokens']}) | {_quality(b['metric'])} |")
        if lm["noisy"]:
            noisy.append(f"{md(b['target'])} {md(b['artifact'])}: {md(', '.join(lm['noisy']))}")
    first = report["benchmarks"][0]["language_model"] if report["benchmarks"] else None
    if not first:
        return lines
    text = report.get("text") or {}
    lines += ["", f"Each figure is the median of {first['rounds']} runs, each a fresh process "
              f"(`python -m runtimes lm-bench`): a {first['prompt_tokens']}-token prompt, then "
              f"{first['new_tokens']} tokens decoded greedily, {first['threads']} thread(s). "
              "Peak MB is the process's peak resident memory, (base) the runtime's before the "
              "model was loaded; the KV cache is computed at the profile's context length. "
              "Quality is against the float export's logits on the same "
              f"{text.get('evaluation_tokens', '—')} token ids ({md(text.get('text', ''))}): "
              "perplexity and its change, mean KL divergence (nats per token), top-1 "
              "next-token agreement, and the share of greedy tokens on the prompts repeated "
              "before the first difference."]
    if noisy:
        lines += ["", "Runs spread by more than 5% (a figure to read with care): "
                  + "; ".join(noisy)]
    return lines + _sweep(report)


def _sweep(report: dict) -> list[str]:
    """The benchmark's `sweep:` points beside each variant's own (budgets are judged at
    the profile's point only)."""
    rows = [(b, point) for b in report["benchmarks"]
            for point in b["language_model"].get("sweep") or ()]
    if not rows:
        return []
    lines = ["", "Speed at other prompt lengths and threads (`sweep:`; budgets are judged at "
             "the profile's point above):", "",
             "| target | artifact | prompt tokens | threads | decode tok/s | prefill tok/s | "
             "time to first token ms | peak MB |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for b, point in rows:
        flag = " †" if point["noisy"] else ""
        lines.append(f"| {md(b['target'])} | {md(b['artifact'])} | {point['prompt_tokens']} | "
                     f"{point['threads']} | {point['decode_tok_s']:.1f}{flag} | "
                     f"{point['prefill_tok_s']:.0f} | {point['ttft_ms']:.1f} | "
                     f"{point['peak_rss_mb']:.0f} |")
    if any(point["noisy"] for _, point in rows):
        lines += ["", "† its runs spread by more than 5%"]
    return lines


def mix_details(report: dict) -> list[str]:
    """The measured mixes: each unit's width, its measured cost at 4 bits, the files
    judged on the way."""
    lines = []
    for artifact in report["artifacts"]:
        mix = (artifact.get("meta") or {}).get("mix")
        if not mix:
            continue
        kept = [u for u, width in mix["bits"].items() if width == mix["high"]]
        limits = ", ".join(f"{b['measure']} at most {b['limit']:g}" for b in mix["budgets"])
        lines += [f"### {md(artifact['id'])}: measured mix ({md(limits)}, "
                  f"{md(mix.get('base_method') or mix['low'])})", "",
                  f"{len(kept)} of {len(mix['bits'])} units at {md(mix['high'])}: "
                  f"{md(', '.join(kept)) or 'none'}; the rest at {md(mix['low'])}. Found in "
                  f"{mix['seconds']:.0f} s.", "",
                  f"| unit | parameters | KL alone at {md(mix['low'])} | perplexity alone | "
                  "width |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {md(c['unit'])} | {c['parameters']:,} | {c['kl_mean']:.4f} | "
                  f"{c['perplexity_increase']:+.2%} | {mix['bits'][c['unit']]} |"
                  for c in mix["ranking"]]
        lines += ["", f"Files judged (units at {md(mix['high'])}, size, quality on the "
                  "evaluation ids): "
                  + "; ".join(f"{len(c['high'])}: {c['bytes'] / 2**20:.1f} MiB, KL "
                              f"{c['quality']['kl_mean']:.4f}, perplexity "
                              f"{c['quality']['perplexity_increase']:+.2%}"
                              for c in mix["candidates"]), ""]
    return lines
