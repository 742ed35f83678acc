"""`make conformance`: every model of the corpus (corpus.py) through its pipeline and,
in the same run on the same data, onnxruntime's quantize_static by hand (by_hand.py).

For each model: the pipeline's own result (what ran, its benchmark), then the FP32 ONNX
file the pipeline quantized, its INT8 and the by-hand INT8 judged by the same code
against the FP32 file's outputs on the same evaluation feeds, and timed side by side in
rounds by the same runner (`python -m runtimes bench`, a fresh process each time).
Writes docs/conformance.json and docs/conformance.md; exits 1 when the pipeline's INT8
is less faithful than the by-hand one on any model, or a recommended variant's worst
output is under the fidelity floor on the evaluation data.

    python examples/conformance/run.py [--only NAME ...] [--rounds 3] [--runs 60]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

import compress  # noqa: E402
from by_hand import outputs_of, quantize_by_hand  # noqa: E402
from corpus import CORPUS, Entry  # noqa: E402
from table import render, render_document  # noqa: E402

from compress.core.artifacts import sha256_file  # noqa: E402
from compress.runner.checks import resolve_inputs  # noqa: E402
from profiles.schema import FLOOR_DB  # noqa: E402
from compress.data.feeds import load_dataset  # noqa: E402
from runtimes.feeds import write_feeds  # noqa: E402
from runtimes.metrics import evaluate, feed_fidelity  # noqa: E402
from runtimes.measure import summarize_latencies  # noqa: E402

OUT = HERE.parents[1] / "runs" / "conformance"
DOCS = HERE.parents[1] / "docs"
TOLERANCE = 1e-4   # cosine: below this the two are the same (float round-off)


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40]


def build(entry: Entry, bench: dict):
    return compress.pipeline(
        name=slug(entry.name), output=str(OUT), model=entry.model(), data=entry.data(),
        stages=[*entry.stages, bench], targets=[{"profile": "host-cpu", "gate": False}])


def time_side_by_side(models: dict, feed: dict, names, rounds: int, runs: int) -> dict:
    """p50 latency (ms) of each model, timed in turn for `rounds` rounds."""
    samples = {label: [] for label in models}
    with tempfile.TemporaryDirectory() as scratch:
        batch = Path(scratch) / "batch.npz"
        write_feeds(str(batch), [feed], names)
        for _ in range(rounds):
            for label, path in models.items():
                done = subprocess.run(
                    [sys.executable, "-m", "runtimes", "bench", str(path), "--inputs",
                     str(batch), "--threads", "2", "--warmup", "5", "--runs", str(runs),
                     "--samples", "--json", "--meter", "none"],
                    capture_output=True, text=True, check=True, cwd=HERE.parents[1])
                samples[label] += json.loads(done.stdout.splitlines()[-1])["latency_samples_ms"]
    return {label: summarize_latencies(values)["p50"] for label, values in samples.items()}


def judged(path: Path, feeds: list, reference: list, names, labels) -> dict:
    outputs = outputs_of(path, feeds)
    row = {k: v for k, v in feed_fidelity(outputs, reference, names).items() if k != "outputs"}
    if labels is not None:
        row["accuracy"] = evaluate(outputs, metric="accuracy", labels=labels)["value"]
    return row


def compare(entry: Entry, result, pipeline, args) -> dict:
    """The by-hand INT8 beside the pipeline's, judged and timed alike."""
    artifacts = {a.id: a for a in result.artifacts}
    fp32, int8 = (result.run_dir / artifacts[n].path for n in (entry.fp32, "int8"))
    resolved = resolve_inputs(pipeline)
    calibration = load_dataset(resolved, "calibration", resolved.model.inputs)
    evaluation = load_dataset(resolved, "evaluation", resolved.model.inputs)
    by_hand = result.run_dir / "by_hand.onnx"
    made = quantize_by_hand(fp32, calibration.take(256), by_hand)
    feeds, names = list(evaluation.feeds), [d.name for d in resolved.model.inputs]
    reference = outputs_of(fp32, feeds)
    labels = list(evaluation.labels) if evaluation.class_labels() is not None else None
    models = {"fp32": fp32, "pipeline": int8, "by_hand": by_hand}
    identical = sha256_file(int8) == sha256_file(by_hand)
    timed = {k: v for k, v in models.items() if not (identical and k == "by_hand")}
    p50 = time_side_by_side(timed, feeds[0], names, args.rounds, args.runs)
    if identical:  # one file: timing it twice would only show the machine's noise
        p50["by_hand"] = p50["pipeline"]
    return {"by_hand_seconds": made["seconds"], "by_hand_load_error": made["load_error"],
            "by_hand_opset_upgraded": made["opset_upgraded"], "by_hand_identical": identical,
            "fidelity": {label: judged(path, feeds, reference, None, labels)
                         for label, path in models.items() if label != "fp32"},
            "p50_ms": p50}


def run_entry(entry: Entry, args) -> dict:
    bench = {"type": "benchmark", "warmup": 5, "runs": args.runs, "rounds": args.rounds}
    pipeline = build(entry, bench)
    started = time.perf_counter()
    result = compress.run(pipeline, quiet=not args.verbose)
    row = {"name": entry.name, "package": entry.package, "wall_s": time.perf_counter() - started,
           "artifacts": [a.to_dict() for a in result.artifacts],
           "benchmarks": result.benchmarks, "gains": result.report["gains"],
           "recommendations": result.report["recommendations"],
           "inputs": [d.model_dump() for d in resolve_inputs(pipeline).model.inputs]}
    if entry.by_hand:
        row.update(compare(entry, result, pipeline, args))
    return row


def under_the_floor(row: dict) -> list[str]:
    """A recommended variant whose worst output is under the fidelity floor on the
    evaluation data, with no verdict that says so (the profile's output_sqnr_db judges
    it; a recommendation past it would be a broken model shipped silently)."""
    sqnr = {(b["artifact"], b["target"]): ((b.get("metric") or {}).get("details") or {})
            .get("sqnr_db") for b in row.get("benchmarks") or []}
    found = []
    for pick in row.get("recommendations") or []:
        value = sqnr.get((pick.get("artifact"), pick["target"]))
        if not pick.get("baseline") and value is not None and value < FLOOR_DB:
            found.append(f"{row['name']}: {pick['artifact']} recommended for {pick['target']} "
                         f"at {value:.1f} dB, under the floor of {FLOOR_DB:g} dB")
    return found


def verdicts(rows: list[dict]) -> list[str]:
    """Where the pipeline's INT8 is less faithful than by hand (cosine to FP32), and any
    recommended variant under the fidelity floor."""
    worse = [line for row in rows for line in under_the_floor(row)]
    for row in rows:
        fidelity = row.get("fidelity")
        if fidelity and fidelity["pipeline"]["cosine"] + TOLERANCE < fidelity["by_hand"]["cosine"]:
            worse.append(f"{row['name']}: cosine {fidelity['pipeline']['cosine']:.5f} vs "
                         f"{fidelity['by_hand']['cosine']:.5f} by hand")
    return worse


def _in_own_process(entry: Entry, args, folder: Path) -> dict:
    """One entry in a fresh Python: the examples' modules (model.py, data.py, ...) share
    names, and one model's memory never weighs on the next."""
    out = folder / f"{slug(entry.name)}.json"
    command = [sys.executable, __file__, "--entry", entry.name, "--json", str(out),
               "--rounds", str(args.rounds), "--runs", str(args.runs)]
    subprocess.run(command + (["--verbose"] if args.verbose else []), check=True)
    return json.loads(out.read_text())


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")   # one write: print's text and newline come apart in threads
    sys.stdout.flush()


def run_all(chosen: list[Entry], args) -> list[dict]:
    """Each entry in its own process, `args.jobs` at a time, the longest first; the rows
    in corpus order.
    A model's files and fidelity do not depend on what runs beside it (each runtime's
    threads are set, not taken from the load); its timings do."""
    def one(entry: Entry) -> dict:
        _say(f"== {entry.name} ({entry.package})")
        row = _in_own_process(entry, args, Path(scratch))
        _say(f"   {entry.name}: done in {row['wall_s']:.0f} s")
        return row
    # the longest first (the last full run's times, docs/conformance.json): a long model
    # started last would run alone at the end while the other job idles
    before = {}
    if args.jobs > 1 and (DOCS / "conformance.json").is_file():
        before = {r["name"]: r["wall_s"] for r in json.loads((DOCS / "conformance.json").read_text())}
    order = sorted(chosen, key=lambda e: -before.get(e.name, 0.0))
    with tempfile.TemporaryDirectory() as scratch:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            rows = dict(zip((e.name for e in order), pool.map(one, order)))
    return [rows[e.name] for e in chosen]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="entries whose name contains this")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--verbose", action="store_true", help="the pipeline's progress")
    parser.add_argument("--jobs", type=int, default=1,
                        help="models compressed at once (CI, which checks the fidelity: "
                        "the timings of models run side by side are not comparable)")
    parser.add_argument("--entry", help=argparse.SUPPRESS)  # one entry, in this process
    parser.add_argument("--json", help=argparse.SUPPRESS)
    parser.add_argument("--rows", help="also write the rows of this run, a part of the corpus "
                        "too, as JSON to this file (make same-as)")
    args = parser.parse_args()
    if args.entry:
        entry = next(e for e in CORPUS if e.name == args.entry)
        Path(args.json).write_text(json.dumps(run_entry(entry, args), default=str))
        return 0
    chosen = [e for e in CORPUS if not args.only or any(o.lower() in e.name.lower()
                                                         for o in args.only)]
    rows = run_all(chosen, args)
    table = render(rows)
    if args.rows:
        Path(args.rows).write_text(json.dumps(rows, indent=1, default=str))
    if not args.only:  # the documents hold the whole corpus, never a part of it
        from runtimes.hostinfo import describe_host
        DOCS.mkdir(exist_ok=True)
        (DOCS / "conformance.json").write_text(json.dumps(rows, indent=1, default=str))
        when = time.strftime("%Y-%m-%d")
        if args.jobs > 1:
            when += f", {args.jobs} models at once (timings not comparable)"
        (DOCS / "conformance.md").write_text(render_document(
            rows, describe_host(), f"{when}, `make conformance` ({args.rounds} rounds x "
            f"{args.runs} timed runs per model)"))
    print(table)
    worse = verdicts(rows)
    for line in worse:
        print(f"LESS FAITHFUL THAN BY HAND: {line}", file=sys.stderr)
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
