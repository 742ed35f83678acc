"""docs/slm_weight_only.md from examples/slm/weight_only.py's record."""
from __future__ import annotations

import time

from runtimes.hostinfo import describe_host


def _speed(speed: dict, key: str, digits: int = 1) -> str:
    flag = " (spread over 5%)" if key in speed["noisy"] else ""
    return f"{speed[key]:.{digits}f}{flag}"


def _decode_at(row: dict, threads: int) -> float:
    """A row's decode tokens/s at `threads` (keys are strings once read back from JSON)."""
    found = row["decode_by_threads"]
    return found[threads] if threads in found else found[str(threads)]


def row_line(row: dict, float_decode: float, more_threads=()) -> str:
    q, s = row["quality"], row["speed"]
    seconds = f"{row['seconds']:.0f} s" if row["seconds"] is not None else "—"
    more = "".join(f" {_decode_at(row, t):.1f} |" for t in more_threads)
    return (f"| {row['label']} | {row['bytes'] / 2**20:.1f} MiB | "
            f"{q['perplexity']:.3f} ({q['perplexity_increase']:+.2%}) | {q['kl_mean']:.4f} | "
            f"{q['top1_agreement']:.3f} | {_speed(s, 'prefill_tok_s', 0)} | "
            f"{_speed(s, 'decode_tok_s')} ({s['decode_tok_s'] / float_decode:.2f}x) |{more} "
            f"{s['peak_rss_mb']:.0f} MB | {seconds} |")


def _budget(mix: dict) -> str:
    if mix.get("measure", "perplexity_increase") == "kl_mean":
        return f"Budget: mean KL {mix['budget']:g} nats per token"
    return f"Perplexity budget: +{mix.get('budget', mix.get('perplexity_budget')):.0%}"


def mix_lines(mix: dict, title: str, probe: str, high: str) -> list[str]:
    """A mix search's section: `probe` says what a unit's probe holds, `high` names the
    wider width."""
    lines = ["", f"## {title}", "",
             f"{probe}, against the float model; ranked by mean KL "
             f"per weight. {_budget(mix)}.", "",
             "| rank | unit | weights | KL alone low | perplexity alone |",
             "|---:|---|---:|---:|---:|"]
    for n, cost in enumerate(mix["ranking"], 1):
        lines.append(f"| {n} | {cost['unit']} | {cost['parameters'] / 1e6:.2f} M | "
                     f"{cost['kl_mean']:.4f} | {cost['perplexity_increase']:+.2%} |")
    lines += ["", f"Files built and judged on the evaluation text (k most costly units at "
              f"{high}):", "", f"| units at {high} | size | perplexity vs float | mean KL |",
              "|---|---:|---:|---:|"]
    for c in sorted(mix["candidates"], key=lambda c: len(c["high"])):
        lines.append(f"| {len(c['high'])}: {', '.join(c['high']) or '—'} | "
                     f"{c['bytes'] / 2**20:.1f} MiB | {c['quality']['perplexity_increase']:+.2%} | "
                     f"{c['quality']['kl_mean']:.4f} |")
    chosen = mix["chosen"]
    lines += ["", f"Chosen: {len(chosen['high'])} units at {high}." if chosen else
              f"No mix met the budget: even every unit at {high} missed it."]
    return lines


def _mixes(record: dict) -> list[str]:
    args = record["args"]
    unit = "transformer layer" if args.get("granularity", "layer") == "layer" else "MatMul"
    lines = mix_lines(record["mix"], "The measured mix (onnxruntime-genai)",
                      f"Each unit (a {unit}) alone at INT4, every other weight float, on "
                      f"{args['calibration']} calibration tokens", "INT8")
    if record.get("gguf_mix"):
        low, high = args["gguf_low"], args["gguf_high"]
        lines += mix_lines(record["gguf_mix"], "The measured mix (llama.cpp)",
                           f"Each unit (a transformer layer, or the embedding table) alone at "
                           f"{low}, every other weight at {high}, all made by llama.cpp's "
                           f"quantizer, on {args['calibration']} calibration tokens", high)
    return lines


def render_document(record: dict) -> str:
    args, rows = record["args"], record["rows"]
    float_decode = rows[0]["speed"]["decode_tok_s"]
    threads = args["threads"] if isinstance(args["threads"], list) else [args["threads"]]
    first, more = threads[0], threads[1:]
    lines = [f"# {record['title']} weight-only, side by side", "",
             f"Written by `make slm-weight-only{record['make_args']}` "
             "(`examples/slm/weight_only.py`); do not edit by hand.", "",
             f"{record['model']} ({record['dequantized_from']} weights, dequantized to float by "
             "transformers: the float model here is that dequantized checkpoint). The builder's "
             "files run on onnxruntime-genai, OpenVINO GenAI's (its converter's IR, NNCF's "
             f"compression: {record.get('openvino') or 'left out'}) on openvino-genai, "
             "llama.cpp's (made by its quantizer from the same "
             f"float weights) on llama.cpp ({record.get('llama_cpp') or 'left out'}), all on "
             "the CPU. Quality: the first "
             f"{args['tokens']} tokens of `pydoc_data.topics` (windows of {args['window']}), "
             "against the float export's logits on the same ids. Speed: the same 128-token prompt, "
             f"{args['new_tokens']} generated tokens, {first} thread(s) (decode also on "
             f"{', '.join(map(str, more)) or 'no other count'}), median of "
             f"{args['rounds']} rounds, every file once per round in a fresh process; the "
             "thread counts one after the other in the same run.", "",
             "| file | size | perplexity (vs float) | mean KL | top-1 agreement | prefill tok/s "
             f"| decode tok/s, {first} thread (vs float) |"
             + "".join(f" decode tok/s, {t} threads |" for t in more)
             + " peak RSS | quantize time |",
             "|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(more) + "---:|---:|"]
    lines += [row_line(row, float_decode, more) for row in rows]
    lines += _mixes(record)
    lines += ["", f"Measured on {describe_host()}, {time.strftime('%Y-%m-%d')}."]
    return "\n".join(lines) + "\n"
