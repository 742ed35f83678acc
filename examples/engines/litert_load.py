"""What XNNPACK's weight cache changes: load time, first inference, steady latency and
memory of LiteRT files, each run by the runner in a fresh process.

    python examples/engines/litert_load.py FILE.tflite [FILE.tflite ...] [--reps 5]

For each file and repetition, three fresh runner processes in this order: without the
cache, with an empty cache directory (the file is written), with it again (a hit). The
table gives the median over repetitions of each field of the runner's record: load_ms
(the session opened), first_run_ms, latency p50, model_rss_mb (peak RSS over the idle
process). Writes nothing but a temporary cache directory, removed at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

FIELDS = (("load ms", lambda r: r["load_ms"]), ("first inference ms", lambda r: r["first_run_ms"]),
          ("p50 ms", lambda r: r["latency_ms"]["p50"]), ("model RSS MB", lambda r: r["model_rss_mb"]))
CONFIGS = ("no cache", "cache written", "cache hit")


def _run(path: str, threads: int, cache: str | None) -> dict:
    command = [sys.executable, "-m", "runtimes", "bench", path, "--json", "--runs", "50",
               "--threads", str(threads), *(["--xnnpack-weight-cache", cache] if cache else [])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        sys.exit(f"error: {' '.join(command)} failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure(path: str, reps: int, threads: int) -> dict[str, list[dict]]:
    records: dict[str, list[dict]] = {config: [] for config in CONFIGS}
    for _ in range(reps):
        cache = tempfile.mkdtemp(prefix="xnnpack-cache-")
        try:
            records["no cache"].append(_run(path, threads, None))
            records["cache written"].append(_run(path, threads, cache))
            records["cache hit"].append(_run(path, threads, cache))
        finally:
            shutil.rmtree(cache)
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    missing = [f for f in args.files if not os.path.isfile(f)]
    if missing:
        print(f"error: no such file: {', '.join(missing)} (`make engines` writes "
              "runs/efficientnet_lite0_engines/*/model.tflite)", file=sys.stderr)
        return 2
    print(f"medians of {args.reps} fresh processes each, {args.threads} threads\n")
    print("| file | " + " | ".join(["config", *(name for name, _ in FIELDS)]) + " |")
    print("|---|---|" + "---:|" * len(FIELDS))
    for path in args.files:
        for config, records in _measure(path, args.reps, args.threads).items():
            cells = [f"{statistics.median(get(r) for r in records):.2f}" for _, get in FIELDS]
            print(f"| {path} | {config} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
