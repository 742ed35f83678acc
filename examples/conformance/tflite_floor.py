"""int8-static's fidelity floor on the corpus's TFLite models (floor.py does the ONNX
ones): each .tflite model the corpus quantizes, through the quantize stage as the
pipeline runs it (compress.run, the corpus's own data), with `recover: false` and with
each floor asked for (the default, 10 dB, unless --floors). Beside them, in the same
run, what a user does by hand: the file mended into the form ai-edge-quantizer takes
(compress/quant/tflite/normalise.py), then ai-edge-quantizer's `static_wi8_ai8` defaults
on the same calibration feeds (examples/anchors/tools.py). Every file is scored on the
evaluation feeds against the file as shipped, and timed in turns with it by the same
runner (`--rounds` fresh processes each). Prints a few lines per run; writes
runs/tflite_floor/floor.json.

    .venv/bin/python examples/conformance/tflite_floor.py --only selfie --floors 10 14 20
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
from run import slug, time_side_by_side  # noqa: E402

sys.path.insert(0, str(HERE.parent / "anchors"))
from tools import guarded, quantize_aeq_defaults  # noqa: E402

from compress.quant.tflite.normalise import normalise  # noqa: E402

from compress.model.run import run_feeds  # noqa: E402
from runtimes.metrics import feed_fidelity  # noqa: E402

WORK = HERE.parents[1] / "runs" / "tflite_floor"


def quantized(entry, name: str, **settings) -> tuple[dict, Path, float]:
    """int8-static on the entry's .tflite file: the artifact's meta, its file, the run's
    wall time."""
    pipeline = compress.pipeline(name=name, output=str(WORK), model=entry.model(),
                                 data=entry.data(), stages=[{**INT8, **settings}])
    started = time.perf_counter()
    result = compress.run(pipeline, quiet=True)
    artifact = result.artifacts[-1]
    return artifact.meta, result.run_dir / artifact.path, time.perf_counter() - started


def said(floor: dict) -> str:
    """The floor's record in one line."""
    line = f"{floor['sqnr_db']} dB on the check, floor {floor['floor_db']:g}: "
    if "steps" not in floor:
        return line + ("held" if floor["held"] else "not held, not recovered")
    layers = ", ".join(f"{layer['tensor']} ({layer['op']}) {layer['precision']}"
                       for layer in floor["layers"]) or "none kept"
    return (line + f"{floor['sqnr_db_after']} dB after {len(floor['steps'])} steps in "
            f"{floor['seconds']} s ({'held' if floor['held'] else 'not held'}); {layers}")


def by_hand(entry, source: Path) -> tuple[dict, Path | None]:
    """ai-edge-quantizer's defaults on the file mended as a user would have to (the
    quantizer crashes on, or misreads, the forms apps ship): its record and file."""
    folder = WORK / f"{slug(entry.name)}-by-hand"
    folder.mkdir(parents=True, exist_ok=True)
    mended = normalise(source, folder / "mended.tflite")
    target = folder / "aeq_defaults.tflite"
    made = guarded(quantize_aeq_defaults, mended.path, entry.data()["calibration"](), target)
    made["mended"] = list(mended.record.as_meta())
    return made, (None if "error" in made else target)


def timed(files: dict[str, Path], feed: dict, rounds: int) -> dict:
    """Each file's p50 (ms) and speed-up over the file as shipped, timed in turns."""
    p50 = time_side_by_side(files, feed, list(feed), rounds, 20)
    return {label: {"p50_ms": round(ms, 4), "speed_up": round(p50["source"] / ms, 2)}
            for label, ms in p50.items()}


def measure(entry, floors: list[float], rounds: int) -> list[dict]:
    source = Path(entry.model()["tflite"])
    feeds = entry.data()["evaluation"]()
    reference = run_feeds(source, None, feeds)
    rows, files = [], {"source": source}
    for settings in [{"recover": False}, *({"floor_db": f} for f in floors)]:
        name = f"{slug(entry.name)}-{'-'.join(f'{k}-{v}' for k, v in settings.items())}"
        meta, path, seconds = quantized(entry, name, **settings)
        judged = feed_fidelity(run_feeds(path, None, feeds), reference)
        row = {"model": entry.name, "settings": settings, "stage_seconds": round(seconds, 1),
               "fidelity_floor": meta["fidelity_floor"], "dtypes": meta["tensors"]["dtypes"],
               "float_ops": meta["float_ops"], "evaluation_sqnr_db": round(judged["sqnr_db"], 2),
               "evaluation_cosine": round(judged["cosine"], 4)}
        print(f"{entry.name} {settings}: {said(meta['fidelity_floor'])}; evaluation "
              f"{row['evaluation_sqnr_db']} dB, cosine {row['evaluation_cosine']} "
              f"(stage {seconds:.1f} s)", flush=True)
        rows.append(row)
        files[name] = path
    made, path = by_hand(entry, source)
    row = {"model": entry.name, "settings": "ai-edge-quantizer defaults by hand", **made}
    if path is not None:
        judged = feed_fidelity(run_feeds(path, None, feeds), reference)
        row.update(evaluation_sqnr_db=round(judged["sqnr_db"], 2),
                   evaluation_cosine=round(judged["cosine"], 4))
        files[row["settings"]] = path
    rows.append(row)
    speed = timed(files, feeds[0], rounds)
    for row, label in zip(rows, list(files)[1:]):
        row["timing"] = speed[label]
    print(f"{entry.name}: by hand {made}; evaluation {row.get('evaluation_sqnr_db')} dB; "
          f"timed: {speed}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="corpus names (a part of the name will do)")
    parser.add_argument("--floors", nargs="*", type=float, default=[10.0],
                        help="floor_db of each run after the one without recovery")
    parser.add_argument("--rounds", type=int, default=3,
                        help="fresh processes per file for the timing (20 runs each)")
    args = parser.parse_args()
    entries = [e for e in CORPUS if (not args.only or any(o.lower() in e.name.lower()
                                                         for o in args.only))
               and INT8 in e.stages and "tflite" in e.model()]
    rows = [row for entry in entries for row in measure(entry, args.floors, args.rounds)]
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "floor.json").write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
