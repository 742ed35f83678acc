"""Two runs of one pipeline made the same things: the proof for what `make same-as`'s two
corpus scripts do not run (the language-model examples, run at two commits or forced
twice). Every artifact is compared by the sha256 its run recorded of its files (every file
of a folder artifact, such as an onnxruntime-genai or OpenVINO GenAI folder), its size,
format and precision; every benchmark by its fidelity figures (the metric's value, its
baseline, drop, mean KL, top-1 and greedy agreement), per artifact, target and engine.
Timings, a machine's state and the runs' own paths are left out.

    python examples/same_as/runs.py A B [--content]

A, B: a run folder, its report.json, a run name under runs/ (its latest run) or name~N
(its N-th newest), as `compress compare` takes them. --content (runs made at two commits:
both latest runs, their files on disk): each file of an artifact by its content instead,
an ONNX graph as `make same-as` compares it (without the exporter's source notes and the
producer's version stamp, which onnxruntime-genai's builder takes from the commit of the
checkout it is installed in). Exit 0: the same files and figures; 1: something differs
(listed); 2: bad input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository's packages

from same_as import content_sha256, differences, untimed  # noqa: E402  (this folder's module)

from compress.errors import ConfigError  # noqa: E402
from compress.runner.history import load_report, resolve  # noqa: E402

# what an artifact record says of the file itself (its meta holds timings and the stage's
# own notes, some with the run's paths)
MADE = ("format", "precision", "size_bytes", "sha256")


def made(report: dict, files: Path | None = None) -> dict:
    """What a run made and how faithful it measured it, without timings or paths (files:
    the run's folder, to compare its artifacts' files by content)."""
    artifacts = {a["id"]: {key: a.get(key) for key in MADE}
                 for a in report.get("artifacts") or ()}
    if files is not None:
        for a in report.get("artifacts") or ():
            artifacts[a["id"]]["sha256"] = _contents(files / a["path"])
    figures = {f"{b['artifact']}@{b['target']}@{b.get('engine')}":
               _portable(untimed(b.get("metric")))
               for b in report.get("benchmarks") or ()}
    return {"artifacts": artifacts, "fidelity": figures}


def _contents(path: Path) -> dict[str, str]:
    """Each file of an artifact (a folder's, by its path in the folder) by its content."""
    if not path.exists():
        raise ConfigError(f"{path} is not on disk (a run in history keeps its report "
                          "alone): --content compares two latest runs")
    found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {str(p.relative_to(path)) if path.is_dir() else p.name:
            content_sha256(p, external_data=False) for p in found}


def _portable(metric):
    """A metric without the file it was scored against (a path of its run: the baseline's
    id, kept, names the same thing)."""
    if isinstance(metric, dict):
        return {k: v for k, v in metric.items() if k != "baseline_model"}
    return metric


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the first run (folder, report.json, name or name~N)")
    parser.add_argument("b", help="the second run")
    parser.add_argument("--output", default="runs", help="where run names are looked up")
    parser.add_argument("--content", action="store_true",
                        help="compare the files by content (two latest runs on disk)")
    args = parser.parse_args()
    try:
        paths = [resolve(ref, Path(args.output)) for ref in (args.a, args.b)]
        before, after = (made(load_report(path), path.parent if args.content else None)
                         for path in paths)
    except ConfigError as exc:
        print(f"same-as runs: {exc}", file=sys.stderr)
        return 2
    print(f"A: {paths[0]}\nB: {paths[1]}")
    found = differences(before, after)
    if found:
        print(f"DIFFERENT: {len(found)} difference(s)")
        print("\n".join(f"  {line}" for line in found))
        return 1
    print(f"SAME: {len(after['artifacts'])} artifacts (the sha256 of their files"
          f"{', by content' if args.content else ''}) and "
          f"{len(after['fidelity'])} benchmarks' fidelity figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
