"""Tokens per second of a language model (an onnxruntime-genai folder or a GGUF file on
llama.cpp: runtimes/lm/engines.py), measured in this process (one fresh process per
measurement: `python -m runtimes lm-bench PATH`), and the launcher that repeats it in
fresh processes and reports medians with their spread.

One measurement: load the model (load time), feed a prompt of `prompt_tokens` ids in one
call (prefill tokens/s; time to first token = the prefill and the first pick), then
decode `new_tokens` greedily, one model call per token (decode tokens/s over the calls
after the first pick). Every engine runs the same calls (feed, next_token, done), so the
figures compare. Memory: the process's resident size before loading (the runtime's
base), after loading, and its peak; the weights on disk and the KV cache at the
generated length, computed from the model's own configuration, beside it. The ids it
picked, the machine and whether torch was loaded come with the figures: a device's run is
checked against the host's by its ids.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from runtimes.bench.options import thread_count
from runtimes.errors import ProviderUnavailable
from runtimes.hostinfo import describe_host
from runtimes.lm.engines import for_path
from runtimes.lm.provider import LMProvider, parse_option
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


def _version(packages: tuple[str, ...]) -> str | None:
    """The installed version of the first of `packages` found (a CPU or a GPU build)."""
    from importlib.metadata import PackageNotFoundError, version
    for package in packages:
        try:
            return version(package)
        except PackageNotFoundError:
            continue
    return None


def prompt_ids(model, count: int) -> list[int]:
    """The first `count` ids of the Python reference's text in the model's tokenizer."""
    ids = model.encode(python_docs_text()[:count * 12])
    if len(ids) < count:
        raise ValueError(f"the text gives only {len(ids)} tokens, fewer than {count}")
    return ids[:count]


def measure(path: Path, work: "Workload") -> dict:
    """One measurement in this process (call it once per process: the loads after the
    first find the files in the page cache and the allocator warm). `work.prompt`: the
    ids to feed (every format then gets the same); else the text's first in its
    tokenizer."""
    prompt_tokens, new_tokens, threads = work.prompt_tokens, work.new_tokens, work.threads
    row, form = for_path(path)
    form.runtime()      # the runtime's base: its libraries loaded, no model yet
    base = _status_mb("VmRSS")
    started = time.perf_counter()
    model = form.open(path, threads, context=prompt_tokens + new_tokens,
                      provider=work.provider)
    load_s = time.perf_counter() - started
    loaded = _status_mb("VmRSS")
    prompt = list(work.prompt or prompt_ids(model, prompt_tokens))[:prompt_tokens]
    started = time.perf_counter()
    model.feed(prompt, new_tokens)
    prefill_s = time.perf_counter() - started
    picked = [model.next_token()]            # the first pick, from the prefill's logits
    ttft_s = time.perf_counter() - started
    started = step = time.perf_counter()
    step_ms = []                             # each decode step's time: its spread
    while len(picked) < new_tokens and not model.done():
        picked.append(model.next_token())    # one model call on the last id, then a pick
        now = time.perf_counter()
        step_ms.append((now - step) * 1000)
        step = now
    decode_s, decoded = time.perf_counter() - started, len(picked) - 1
    return {"engine": form.name, "engine_version": _version(form.packages),
            "load_s": load_s, "prompt_tokens": len(prompt),
            "prefill_s": prefill_s, "prefill_tok_s": len(prompt) / prefill_s,
            "ttft_s": ttft_s, "decode_tokens": decoded,
            "decode_tok_s": decoded / decode_s if decoded else 0.0, "step_ms": step_ms,
            "threads": threads, "provider": work.provider.name if work.provider else None,
            "rss_base_mb": base, "rss_loaded_mb": loaded,
            "peak_rss_mb": _status_mb("VmHWM"), "weights_bytes": row.size(path),
            "kv_cache_bytes": form.kv_cache_bytes(path, len(prompt) + new_tokens),
            # what a device's run can be checked by: the same greedy ids as the host's
            "generated_ids": picked, "measured_on": describe_host(),
            "torch_loaded": "torch" in sys.modules}


def _runner_env() -> dict:
    """This checkout's runtimes importable by another Python (a target's `python:`)."""
    import os
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def _one_process(folder, work: "Workload", python: str) -> dict:
    command = [python, "-m", "runtimes", "lm-bench", str(folder), *work.flags()]
    done = subprocess.run(command, capture_output=True, text=True, env=_runner_env())
    if done.returncode == ProviderUnavailable.exit_code:
        raise ProviderUnavailable(done.stderr.strip().removeprefix("error: "))
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


@dataclass(frozen=True)
class Workload:
    """What one measurement runs: `prompt` (ids; else the text's first in the model's
    tokenizer) cut to `prompt_tokens`, then `new_tokens` decoded on `threads`; on
    `provider`'s accelerator (runtimes/lm/provider.py), else the CPU."""
    prompt_tokens: int = 128
    new_tokens: int = 64
    threads: int = 1
    prompt: Optional[list[int]] = None
    provider: Optional[LMProvider] = None

    def flags(self) -> list[str]:
        """The same workload as lm-bench's command line says it."""
        flags = ["--prompt-tokens", str(self.prompt_tokens), "--new-tokens",
                 str(self.new_tokens), "--threads", str(self.threads)]
        if self.prompt:
            flags += ["--prompt-ids", ",".join(map(str, self.prompt[:self.prompt_tokens]))]
        return flags + (self.provider.flags() if self.provider else [])


def measure_in_processes(folders: list, workload: Workload = Workload(), rounds: int = 3,
                         progress: Optional[Callable[[int, int], None]] = None,
                         python: str = sys.executable) -> list[dict]:
    """Each model (a folder or a file) measured `rounds` times, each time in a fresh
    `python -m runtimes lm-bench` process of `python`, the models in turn within a round
    (a machine's drift then weighs on every model alike); a summary per model, in order.
    A workload's `prompt` gives every model the same ids; `progress(done, total)` after
    each run. ProviderUnavailable when the workload's accelerator is not there."""
    runs: list[list[dict]] = [[] for _ in folders]
    for round_index in range(rounds):
        for n, folder in enumerate(folders):
            runs[n].append(_one_process(folder, workload, python))
            if progress:
                progress(round_index * len(folders) + n + 1, rounds * len(folders))
    return [summarize(r) for r in runs]


def _ids(text: str) -> list[int]:
    try:
        return [int(i) for i in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("token ids are integers separated by commas") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runtimes lm-bench",
        description="tokens/s of an onnxruntime-genai folder or a GGUF file (llama.cpp)")
    parser.add_argument("folder", type=Path, metavar="PATH")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=64)
    # bounded as the runner's --threads: 100000 threads exhausted the machine before
    # the model loaded
    parser.add_argument("--threads", type=thread_count, default=1)
    parser.add_argument("--prompt-ids", type=_ids, default=None,
                        help="the prompt's token ids, comma-separated (default: the first "
                        "--prompt-tokens ids of the Python reference's text)")
    parser.add_argument("--provider", default=None,
                        help="the accelerator, as onnxruntime names it "
                        "(CUDAExecutionProvider); default: the CPU")
    parser.add_argument("--provider-option", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    if args.prompt_tokens < 1 or args.new_tokens < 2:
        parser.error("--prompt-tokens must be at least 1 and --new-tokens at least 2")
    from runtimes.errors import RuntimeInputError
    try:
        provider = _provider(args.provider, args.provider_option)
        result = measure(args.folder, Workload(args.prompt_tokens, args.new_tokens,
                                               args.threads, args.prompt_ids, provider))
    except (RuntimeInputError, ValueError) as exc:
        from runtimes.safe_text import safe_text   # a ValueError quotes the options given
        print(f"error: {safe_text(str(exc))}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)   # 3: the accelerator is not here
    print(json.dumps(result))
    return 0


def _provider(name: str | None, options: list[str]) -> LMProvider | None:
    if name is None:
        if options:
            raise ValueError("--provider-option needs a --provider")
        return None
    return LMProvider(name, tuple(parse_option(text) for text in options))
