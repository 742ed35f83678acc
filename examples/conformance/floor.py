"""int8-static's fidelity floor on the conformance corpus: every ONNX model the corpus
quantizes with int8-static, from the FP32 file `make conformance` quantized, through the
quantize stage as the pipeline runs it (compress.run, the corpus's own data) with the
default floor: does a model that is good today fall below it, and where one does, what
the recovery widened, what each step gave and what it cost. A model it recovered is
quantized again with `recover: false`; on a model that held, the floor is set `--above`
dB over its score so the recovery runs on it too. Both files of each model are scored
on the evaluation feeds and, beside them in the same run, onnxruntime's
`quantize_static` by hand (by_hand.py, the same calibration feeds); all three are timed
in turns with the FP32 file by the same runner (`--rounds` fresh processes each). Prints
a few lines per model; writes runs/floor/floor.json.

    make conformance
    .venv/bin/python examples/conformance/floor.py [--only NAME ...] [--above 3]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

import compress  # noqa: E402
from corpus import CORPUS, INT8  # noqa: E402
from by_hand import quantize_by_hand  # noqa: E402
from run import OUT as CONFORMANCE, slug, time_side_by_side  # noqa: E402

from compress.data.feeds import load_dataset  # noqa: E402
from compress.quant.passes.fidelity_floor.mixed_precision import float_outputs, sqnr  # noqa: E402
from compress.runner.checks import resolve_inputs  # noqa: E402

WORK = HERE.parents[1] / "runs" / "floor"
EVALUATION_FEEDS = 64   # spread over each model's evaluation set


def fp32_of(entry) -> Path | None:
    """The FP32 file `make conformance` quantized for this entry; None (said) where it has
    not run it."""
    run = CONFORMANCE / slug(entry.name)
    if not (run / "report.json").is_file():
        print(f"{entry.name}: no run in {run} (make conformance), left out", flush=True)
        return None
    artifacts = json.loads((run / "report.json").read_text())["artifacts"]
    return run / next(a["path"] for a in artifacts if a["id"] == entry.fp32)


def quantized(entry, fp32: Path, name: str, **settings) -> tuple[dict, Path, float]:
    """int8-static on `fp32` with the corpus's data: the artifact's meta, its file and
    the stage's wall time."""
    pipeline = compress.pipeline(name=name, output=str(WORK), model={"onnx": str(fp32)},
                                 data=entry.data(), stages=[{**INT8, **settings}])
    started = time.perf_counter()
    result = compress.run(pipeline, quiet=True)
    artifact = result.artifacts[-1]
    return artifact.meta, result.run_dir / artifact.path, time.perf_counter() - started


def datasets(entry, fp32: Path) -> tuple:
    """The entry's calibration and evaluation datasets, read as the pipeline reads them."""
    resolved = resolve_inputs(compress.pipeline(
        name="eval", output=str(WORK), model={"onnx": str(fp32)}, data=entry.data(),
        stages=[INT8]))
    return tuple(load_dataset(resolved, split, resolved.model.inputs)
                 for split in ("calibration", "evaluation"))


def evaluated(entry, fp32: Path, paths: list[Path]) -> list[float]:
    """Each file's output SQNR (worst output) against the FP32 file on the evaluation feeds."""
    data = datasets(entry, fp32)[1]
    feeds = [data.feeds[i] for i in data.spread(EVALUATION_FEEDS)]
    reference = float_outputs(fp32.read_bytes(), feeds, None)
    return [sqnr(path.read_bytes(), feeds, reference) for path in paths]


def beside_by_hand(entry, fp32: Path, files: dict[str, Path], rounds: int) -> dict:
    """quantize_static by hand on the same calibration feeds, scored on the evaluation
    feeds, and every file's p50 and speed-up over FP32, timed in turns."""
    calibration, evaluation = datasets(entry, fp32)
    target = WORK / f"{slug(entry.name)}-by-hand.onnx"
    made = quantize_by_hand(fp32, calibration.take(256), target)
    files = {"fp32": fp32, **files, "by_hand": target}
    p50 = time_side_by_side(files, evaluation.feeds[0], list(evaluation.feeds[0]), rounds, 20)
    return {"by_hand_seconds": round(made["seconds"], 1),
            "by_hand_load_error": made["load_error"],
            "by_hand_evaluation_sqnr_db": evaluated(entry, fp32, [target])[0],
            "p50_ms": p50, "speed_up": {k: round(p50["fp32"] / v, 2) for k, v in p50.items()}}


def measure(entry, above: float, rounds: int) -> dict:
    """The stage as it comes; then, where it recovered, again without recovery, else
    with the floor `above` dB over its score; both files on the evaluation feeds."""
    fp32 = fp32_of(entry)
    meta, path, seconds = quantized(entry, fp32, slug(entry.name))
    floor = meta["fidelity_floor"]
    row = {"model": entry.name, "default": floor, "stage_seconds": round(seconds, 1),
           "activation_types": meta["qdq"]["activation_types"]}
    print(f"{entry.name}: {floor['sqnr_db']} dB on the check, floor {floor['floor_db']} "
          f"{'held' if floor['held'] else 'NOT held'}"
          + (f", recovered to {floor['sqnr_db_after']} dB with "
             f"{len(floor['layers'])} layers in {floor['seconds']} s" if "layers" in floor
             else "") + f" (stage {seconds:.1f} s)", flush=True)
    if floor.get("recovered"):
        _, without, _ = quantized(entry, fp32, f"{slug(entry.name)}-without", recover=False)
        files = [without, path]
    elif above:
        meta, forced, seconds = quantized(entry, fp32, f"{slug(entry.name)}-above",
                                          floor_db=floor["sqnr_db"] + above)
        row.update(forced=meta["fidelity_floor"], forced_stage_seconds=round(seconds, 1),
                   forced_activation_types=meta["qdq"]["activation_types"])
        files = [path, forced]
        forced = meta["fidelity_floor"]
        print(f"   floor {forced['floor_db']:.2f}: {forced.get('sqnr_db_after')} dB after "
              f"{len(forced.get('steps', []))} steps, {len(forced.get('layers', []))} layers "
              f"with more bits, {forced.get('seconds')} s", flush=True)
    else:
        return row
    row["evaluation_sqnr_db"] = dict(zip(("before", "after"), evaluated(entry, fp32, files)))
    print(f"   evaluation feeds: {row['evaluation_sqnr_db']}", flush=True)
    if files:
        row.update(beside_by_hand(entry, fp32, dict(zip(("before", "after"), files)), rounds))
        print(f"   by hand {row['by_hand_evaluation_sqnr_db']:.2f} dB; speed-up over FP32: "
              f"{row['speed_up']}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="corpus names (a part of the name will do)")
    parser.add_argument("--above", type=float, default=3.0,
                        help="dB over each model's score for the forced run (0: none)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="fresh processes per file for the timing (20 runs each)")
    args = parser.parse_args()
    # the ONNX models: a TFLite source's int8 is ai-edge-quantizer's, which has no floor
    entries = [e for e in CORPUS if INT8 in e.stages
               and (not args.only or any(o.lower() in e.name.lower() for o in args.only))]
    entries = [e for e in entries if (fp32_of(e) or Path()).suffix == ".onnx"]
    rows = [measure(entry, args.above, args.rounds) for entry in entries]
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "floor.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
