"""The search example serial and on Ray, each from an empty stage cache, side by side:
wall time of each, their ratio, and whether the two made the same files (sha256 of every
artifact of every trial).

    python examples/search/ray_vs_serial.py [--pipeline examples/search/ray.yaml]
                                            [--json docs/scale-search.json]

Both runs use the same pipeline file (ray.yaml: the serial run is `--executor local`),
each in a temporary output folder of its own, so neither reuses the other's stages or
measurements. Run it on a quiet machine: the two are timed one after the other.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _search(pipeline: Path, output: Path, executor: str) -> dict:
    started = time.perf_counter()
    child = subprocess.run([sys.executable, "-m", "compress", "run", str(pipeline), "--output",
                            str(output), "--executor", executor, "--quiet"], cwd=REPO,
                           capture_output=True, text=True)
    wall = time.perf_counter() - started
    if child.returncode not in (0, 1):
        sys.exit(f"the {executor} search failed ({child.returncode}):\n{child.stderr[-3000:]}")
    (report_path,) = output.glob("*/report.json")
    report = json.loads(report_path.read_text())
    states = [t["state"] for t in report["search"]["trials"]]
    # a trial's seconds: its whole run serially; on Ray, what this process spent on it
    # after its task (re-using the stages, then measuring)
    seconds = sorted(t["seconds"] for t in report["search"]["trials"] if t["state"] == "complete")
    return {"executor": executor, "wall_s": round(wall, 1),
            "trial_seconds_median": seconds[len(seconds) // 2] if seconds else None,
            "trials_run": sum(s in ("complete", "failed") for s in states),
            "trials": len(states),
            "files": {a["id"]: a["sha256"] for a in report["artifacts"]},
            "recommendations": {r["target"]: r.get("artifact")
                                for r in report["recommendations"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pipeline", type=Path, default=REPO / "examples/search/ray.yaml")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--keep", type=Path, help="keep both searches' folders under this "
                        "folder (default: temporary, removed)")
    args = parser.parse_args()
    runs = []
    for executor in ("local", "ray"):
        with tempfile.TemporaryDirectory(prefix=f"search-{executor}-") as out:
            out = args.keep / executor if args.keep else Path(out)
            print(f"{executor}: running the search from an empty cache ...", flush=True)
            runs.append(_search(args.pipeline.resolve(), out, executor))
    serial, ray = runs
    same = serial["files"] == ray["files"]
    for name in sorted(set(serial["files"]) | set(ray["files"])):
        if serial["files"].get(name) != ray["files"].get(name):
            print(f"differs: {name}")
    print("\n| executor | wall s | trials run | median s a trial spent here |\n|---|---|---|---|")
    for run in runs:
        print(f"| {run['executor']} | {run['wall_s']:.1f} | {run['trials_run']} of "
              f"{run['trials']} | {run['trial_seconds_median']} |")
    print(f"\nRay / serial wall time: {ray['wall_s'] / serial['wall_s']:.2f}")
    print(f"same files (sha256 of all {len(serial['files'])} artifacts): {same}")
    if args.json:
        args.json.write_text(json.dumps({"runs": [{k: v for k, v in r.items() if k != "files"}
                                                  for r in runs], "same_files": same,
                                         "ratio": ray["wall_s"] / serial["wall_s"]}, indent=1))
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
