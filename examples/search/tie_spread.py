"""How far apart one file measures from one runner process to the next: the basis of
compress.measure.noise.TIE_RATIO (two variants whose p90 differ by less are a tie).

    python examples/search/tie_spread.py MODEL [MODEL ...] [--times 5]

Each model is measured `--times` times, each in a fresh `python -m runtimes bench`
process (2 threads, 10 warm-up and 100 timed runs, as a search trial's benchmark times a
variant per round); prints the p90s' range and spread (max / min - 1).
"""
import argparse
import json
import statistics
import subprocess
import sys


def p90s(path: str, times: int) -> list[float]:
    found = []
    for _ in range(times):
        out = subprocess.run([sys.executable, "-m", "runtimes", "bench", path, "--json",
                              "--threads", "2", "--warmup", "10", "--runs", "100"],
                             capture_output=True, text=True, check=True)
        found.append(json.loads(out.stdout)["latency_ms"]["p90"])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--times", type=int, default=5)
    args = parser.parse_args()
    for path in args.models:
        found = p90s(path, args.times)
        print(f"{path}: p90 {min(found):.3f}-{max(found):.3f} ms, median "
              f"{statistics.median(found):.3f}, spread {max(found) / min(found) - 1:.1%}")


if __name__ == "__main__":
    main()
