"""Tokens per second of an onnxruntime-genai model folder, measured in this process (one
fresh process per measurement: `python -m runtimes lm-bench FOLDER`), and the launcher
that repeats it in fresh processes and reports medians with their spread.

One measurement: load the model (load time), feed a prompt of `prompt_tokens` ids in one
call (prefill tokens/s; time to first token = the prefill and the first pick), then
decode `new_tokens` greedily, one model call per token (decode tokens/s over the calls
after the first pick). Memory: the process's resident size before loading (the
runtime's base), after loading, and its peak; the weights on disk and the KV cache at
the generated length, computed from genai_config.json, beside it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from runtimes.lm.genai import GenaiModel, folder_bytes, import_genai, require_folder
from runtimes.lm.text import python_docs_text

SPREAD_WARNING = 0.05   # a median whose runs spread more than this says so
FIGURES = ("load_s", "prefill_tok_s", "ttft_s", "decode_tok_s", "peak_rss_mb")


def _status_mb(field: str) -> float:
    """A size from /proc/self/status: VmRSS (resident now), VmHWM (the peak). Not
    getrusage's ru_maxrss, which keeps the peak of the process this one was forked from
    (a large parent's size shows up in every child it starts)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def kv_cache_bytes(folder: Path, tokens: int) -> int:
    """Keys and values of every layer for `tokens` positions, as genai_config.json
    declares them (float32 on the CPU)."""
    decoder = json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]
    per_token = 2 * decoder["num_hidden_layers"] * decoder["num_key_value_heads"] * decoder["head_size"]
    return per_token * tokens * 4


def prompt_ids(model: GenaiModel, count: int) -> list[int]:
    """The first `count` ids of the Python reference's text in the model's tokenizer."""
    tokenizer = model.tokenizer()
    ids = list(tokenizer.encode(python_docs_text()[:count * 12]))
    if len(ids) < count:
        raise ValueError(f"the text gives only {len(ids)} tokens, fewer than {count}")
    return ids[:count]


def measure(folder: Path, prompt_tokens: int, new_tokens: int, threads: int) -> dict:
    """One measurement in this process (call it once per process: the loads after the
    first find the files in the page cache and the allocator warm)."""
    import_genai()     # the runtime's base: its libraries loaded, no model yet
    base = _status_mb("VmRSS")
    started = time.perf_counter()
    model = GenaiModel(folder, threads=threads)
    load_s = time.perf_counter() - started
    loaded = _status_mb("VmRSS")
    prompt = prompt_ids(model, prompt_tokens)
    generator = model.generator(prompt_tokens + new_tokens)
    started = time.perf_counter()
    generator.append_tokens(prompt)
    prefill_s = time.perf_counter() - started
    generator.generate_next_token()          # the first pick, from the prefill's logits
    ttft_s = time.perf_counter() - started
    started, decoded = time.perf_counter(), 0
    while decoded < new_tokens - 1 and not generator.is_done():
        generator.generate_next_token()      # one model call on the last id, then a pick
        decoded += 1
    decode_s = time.perf_counter() - started
    return {"load_s": load_s, "prompt_tokens": prompt_tokens, "prefill_s": prefill_s,
            "prefill_tok_s": prompt_tokens / prefill_s, "ttft_s": ttft_s,
            "decode_tokens": decoded, "decode_tok_s": decoded / decode_s if decoded else 0.0,
            "threads": threads, "rss_base_mb": base, "rss_loaded_mb": loaded,
            "peak_rss_mb": _status_mb("VmHWM"),
            "weights_bytes": folder_bytes(folder),
            "kv_cache_bytes": kv_cache_bytes(folder, prompt_tokens + new_tokens)}


def _one_process(folder, prompt_tokens: int, new_tokens: int, threads: int) -> dict:
    command = [sys.executable, "-m", "runtimes", "lm-bench", str(folder), "--prompt-tokens",
               str(prompt_tokens), "--new-tokens", str(new_tokens), "--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"lm-bench failed on {folder}: {done.stderr.strip()[-1500:]}")
    return json.loads(done.stdout.splitlines()[-1])


def summarize(runs: list[dict]) -> dict:
    """The median of each figure, its spread ((max - min) / median), the figures whose
    spread is over SPREAD_WARNING, and the runs."""
    summary = {key: statistics.median(r[key] for r in runs) for key in FIGURES}
    spread = {key: (max(r[key] for r in runs) - min(r[key] for r in runs)) / summary[key]
              for key in FIGURES if summary[key]}
    noisy = sorted(k for k, v in spread.items() if v > SPREAD_WARNING)
    return {**runs[0], **summary, "spread": spread, "noisy": noisy, "runs": runs}


def measure_in_processes(folders: list, prompt_tokens: int = 128, new_tokens: int = 64,
                         threads: int = 1, rounds: int = 3) -> list[dict]:
    """Each folder measured `rounds` times, each time in a fresh `python -m runtimes
    lm-bench` process, the folders in turn within a round (a machine's drift then
    weighs on every folder alike); a summary per folder, in order."""
    runs: list[list[dict]] = [[] for _ in folders]
    for _ in range(rounds):
        for n, folder in enumerate(folders):
            runs[n].append(_one_process(folder, prompt_tokens, new_tokens, threads))
    return [summarize(r) for r in runs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtimes lm-bench",
                                     description="tokens/s of an onnxruntime-genai folder")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.prompt_tokens < 1 or args.new_tokens < 2:
        parser.error("--prompt-tokens must be at least 1 and --new-tokens at least 2")
    from runtimes.errors import RuntimeInputError
    try:
        require_folder(args.folder)
        result = measure(args.folder, args.prompt_tokens, args.new_tokens, args.threads)
    except (RuntimeInputError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0
