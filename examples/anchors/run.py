"""`make anchors`: each CNN of the conformance corpus quantized, in one run on the same
data, by this pipeline, by onnxruntime's quantize_static by hand (U8S8, per-channel,
MinMax), by NNCF (nncf.quantize with its defaults, in .venv-nncf) and, where the
pipeline exports TFLite, by ai-edge-quantizer's defaults; every result judged against
its FP32 file on the same evaluation feeds and timed side by side in rounds.
Writes docs/anchors.md and docs/anchors.json (only for a run of every anchor).

    python examples/anchors/run.py [--only NAME ...] [--rounds 3] [--runs 60]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from anchors import CONFORMANCE, REPO, Anchor, chosen  # noqa: E402  (puts the corpus on the path)
from document import TOOLS, render, render_document  # noqa: E402
from tools import convolutions, guarded, quantize_aeq_defaults, quantize_nncf  # noqa: E402

import compress  # noqa: E402
from by_hand import quantize_by_hand  # noqa: E402
from compress.core.artifacts import sha256_file  # noqa: E402
from compress.runner.checks import resolve_inputs  # noqa: E402
from compress.data.feeds import load_dataset  # noqa: E402
from compress.model.run import run_feeds  # noqa: E402
from runtimes.metrics import evaluate, feed_fidelity  # noqa: E402

OUT = REPO / "runs" / "anchors"
DOCS = REPO / "docs"
SAMPLES = 256  # calibration feeds every tool gets: the pipeline's default


def _conformance_run():
    """examples/conformance/run.py (slug, time_side_by_side), under a name of its own:
    this file is `run` too."""
    spec = importlib.util.spec_from_file_location("conformance_run", CONFORMANCE / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conformance = _conformance_run()


def quantized(anchor: Anchor, result, calibration: list[dict]) -> dict[str, dict]:
    """Every tool's model file with its record (seconds, or the error it met)."""
    artifacts, folder = {a.id: a for a in result.artifacts}, result.run_dir

    def made(artifact_id: str, timed: str = "seconds") -> dict:
        """`timed`: what the stage's seconds were (an FP32 file's are its export's)."""
        artifact = artifacts[artifact_id]
        record = {"path": folder / artifact.path}
        if artifact.stage != "source":
            record[timed] = artifact.meta.get("seconds")
        return record

    tools = {"fp32": made(anchor.corpus.fp32, "export_seconds"), "pipeline": made("int8")}
    fp32 = tools["fp32"]["path"]
    for key, quantize, name in (("by_hand", quantize_by_hand, "by_hand.onnx"),
                                ("nncf", quantize_nncf, "nncf.onnx")):
        tools[key] = {"path": folder / name, **guarded(quantize, fp32, calibration, folder / name)}
    if anchor.tflite:
        tools["tflite-fp32"] = made("tflite-fp32", "export_seconds")
        tools["tflite-pipeline"] = made("tflite-int8")
        target = folder / "aeq_defaults.tflite"
        tools["tflite-aeq"] = {"path": target, **guarded(
            quantize_aeq_defaults, tools["tflite-fp32"]["path"], calibration, target)}
    return tools


def judge(tools: dict[str, dict], feeds: list[dict], labels, classifier: bool) -> None:
    """Each tool's fidelity to its reference's outputs on the same feeds (and accuracy
    where the data has labels)."""
    outputs = {key: run_feeds(tool["path"], None, feeds)
               for key, tool in tools.items() if "error" not in tool}
    for key, tool in tools.items():
        if key not in outputs:
            continue
        reference = TOOLS[key].reference
        row = {}
        if reference in outputs:
            row = {k: v for k, v in feed_fidelity(outputs[key], outputs[reference]).items()
                   if k != "outputs" and (classifier or k != "top1_agreement")}
        if labels is not None:
            row["accuracy"] = evaluate(outputs[key], metric="accuracy", labels=labels)["value"]
        tool["fidelity"] = row


def time_all(tools: dict[str, dict], feed: dict, names: list[str], args) -> None:
    """p50 of every file, timed in turns in the same rounds; a file that is byte for byte
    another tool's is timed once (twice would only show the machine's noise)."""
    unique: dict[str, str] = {}
    for key, tool in tools.items():
        if "error" in tool:
            continue
        tool["sha256"] = sha256_file(tool["path"])
        same = next((k for k, digest in unique.items() if digest == tool["sha256"]), None)
        if same:
            tool["same_file_as"] = same
        else:
            unique[key] = tool["sha256"]
    p50 = conformance.time_side_by_side({k: tools[k]["path"] for k in unique}, feed, names,
                                        args.rounds, args.runs)
    for key, tool in tools.items():
        if "error" not in tool:
            tool["p50_ms"] = p50[tool.get("same_file_as", key)]


def run_anchor(anchor: Anchor, args) -> dict:
    entry = anchor.corpus
    pipeline = compress.pipeline(name=conformance.slug(entry.name), output=str(OUT),
                                 model=entry.model(), data=entry.data(), stages=anchor.stages())
    started = time.perf_counter()
    # force: every stage runs now, so each stage's seconds belong to this run
    result = compress.run(pipeline, force=True, quiet=not args.verbose)
    resolved = resolve_inputs(pipeline)
    calibration = load_dataset(resolved, "calibration", resolved.model.inputs).take(SAMPLES)
    evaluation = load_dataset(resolved, "evaluation", resolved.model.inputs)
    feeds, names = list(evaluation.feeds), [d.name for d in resolved.model.inputs]
    tools = quantized(anchor, result, calibration)
    labels = list(evaluation.labels) if evaluation.class_labels() is not None else None
    judge(tools, feeds, labels, anchor.classifier)
    time_all(tools, feeds[0], names, args)
    for tool in tools.values():
        if "error" not in tool and Path(tool["path"]).suffix == ".onnx":
            tool["convolutions"] = convolutions(tool["path"])
        tool["path"] = str(Path(tool["path"]).relative_to(REPO))
    return {"name": entry.name, "package": entry.package, "classifier": anchor.classifier,
            "feed": {name: list(array.shape) for name, array in feeds[0].items()},
            "calibration_feeds": len(calibration), "evaluation_feeds": len(feeds),
            "wall_s": time.perf_counter() - started, "tools": tools}


def _in_own_process(anchor: Anchor, args) -> dict:
    """One anchor in a fresh Python: the examples' modules share names (model.py), and
    one model's memory never weighs on the next one's timings. Its row stays beside its
    run folder."""
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"{conformance.slug(anchor.entry)}.json"
    command = [sys.executable, __file__, "--entry", anchor.entry, str(out),
               "--rounds", str(args.rounds), "--runs", str(args.runs)]
    subprocess.run(command + (["--verbose"] if args.verbose else []), check=True)
    return json.loads(out.read_text())


def _arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="anchors whose name contains this")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--verbose", action="store_true", help="the pipeline's progress")
    # one anchor in this process, its row written to JSON (how _in_own_process calls it)
    parser.add_argument("--entry", nargs=2, metavar=("NAME", "JSON"), help=argparse.SUPPRESS)
    parser.add_argument("--rows", help="also write the rows of this run, a part of the anchors "
                        "too, as JSON to this file (make same-as)")
    return parser.parse_args()


def main() -> int:
    args = _arguments()
    if args.entry:
        name, out = args.entry
        anchor = next(a for a in chosen(None) if a.entry == name)
        Path(out).write_text(json.dumps(run_anchor(anchor, args), default=str))
        return 0
    rows = []
    for anchor in chosen(args.only):
        print(f"== {anchor.entry}", flush=True)
        rows.append(_in_own_process(anchor, args))
        print(f"   done in {rows[-1]['wall_s']:.0f} s", flush=True)
    if args.rows:
        Path(args.rows).write_text(json.dumps(rows, indent=1, default=str))
    if not args.only:  # the documents hold every anchor, never a part of them
        from runtimes.hostinfo import describe_host
        (DOCS / "anchors.json").write_text(json.dumps(rows, indent=1, default=str))
        (DOCS / "anchors.md").write_text(render_document(rows, describe_host(), (
            f"{time.strftime('%Y-%m-%d')}, `make anchors` ({args.rounds} rounds x "
            f"{args.runs} timed runs per model)")))
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
