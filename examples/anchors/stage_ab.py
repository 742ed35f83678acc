"""The int8-static stage of this checkout against another checkout's (an older commit, say
`git worktree add /tmp/before HEAD~1`), interleaved: each run is a fresh process that
quantizes by hand once to pay the first call's costs, then times the stage and
quantize_static by hand (quant_pre_process + quantize_static) on the same file and
feeds. The checkouts alternate run after run (ABBA...), so drift of this shared machine
falls on both; medians per checkout. Both use this environment's packages; the corpus
files come from `make anchors` as for stage_time.py.

    python examples/anchors/stage_ab.py /tmp/before orientation efficientnet --repeat 4
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one_run(name: str) -> dict:
    """In the child: by hand once to warm up, then the stage and by hand, timed."""
    from run import SAMPLES  # puts the corpus on the path
    from stage_time import _subject

    import compress
    from by_hand import quantize_by_hand
    from compress.runner.checks import resolve_inputs
    from compress.data.feeds import load_dataset
    subject = _subject(name)
    with tempfile.TemporaryDirectory() as folder:
        pipeline = compress.pipeline(name="stage-ab", output=folder,
                                     model={"onnx": str(subject.fp32)}, data=subject.data,
                                     stages=[{"type": "quantize", "scheme": "int8-static"}])
        resolved = resolve_inputs(pipeline)
        feeds = load_dataset(resolved, "calibration", resolved.model.inputs).take(SAMPLES)
        by_hand = Path(folder) / "by_hand.onnx"
        quantize_by_hand(subject.fp32, feeds, by_hand)
        stage = compress.run(pipeline, force=True, quiet=True).artifacts[-1].meta["seconds"]
        started = time.perf_counter()
        quantize_by_hand(subject.fp32, feeds, by_hand)
        return {"stage": stage, "by_hand": time.perf_counter() - started}


def _child(checkout: Path, name: str) -> dict:
    """One run in a fresh process with `checkout`'s code first on the path."""
    script = checkout / "examples" / "anchors" / Path(__file__).name
    if not script.is_file():  # an older checkout without this script: this one's driver
        script = Path(__file__)
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, str(script), "--child", str(checkout), name],
                          capture_output=True, text=True, env=env, cwd=checkout)
    if done.returncode:
        raise SystemExit(f"{checkout}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(other: Path, name: str, repeat: int) -> str:
    checkouts = {"this": HERE.parents[1], "other": other}
    runs: dict[str, list] = {key: [] for key in checkouts}
    for k in range(repeat):
        order = list(checkouts) if k % 2 == 0 else list(reversed(checkouts))
        for key in order:
            runs[key].append(_child(checkouts[key], name))
    cells = []
    for key in checkouts:
        stage = statistics.median(r["stage"] for r in runs[key])
        hand = statistics.median(r["by_hand"] for r in runs[key])
        ratio = statistics.median(r["stage"] / r["by_hand"] for r in runs[key])
        cells.append(f"{stage:.2f} | {hand:.2f} | {ratio:.2f}x")
    return f"| {name} | " + " | ".join(cells) + " |"


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.path[:0] = [str(Path(sys.argv[2]) / "examples" / "anchors"), str(HERE)]
        print(json.dumps(one_run(sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout")
    parser.add_argument("models", nargs="+", help="anchors whose name contains this")
    parser.add_argument("--repeat", type=int, default=4, metavar="N",
                        help="runs per checkout, alternating (default 4)")
    args = parser.parse_args()
    print(f"this checkout vs {args.other}; seconds: medians of {args.repeat} runs each\n\n"
          "| model | stage s | by hand s | ratio | other: stage s | by hand s | ratio |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    for name in args.models:
        print(compare(args.other.resolve(), name, args.repeat), flush=True)


if __name__ == "__main__":
    main()
