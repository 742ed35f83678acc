"""The INT8 techniques of compress/quant side by side on the image CNNs of the conformance
corpus, on the same calibration and evaluation feeds: onnxruntime's quantize_static by
hand, each range estimator (ranges.py), cross-layer equalization (equalize.py), fast bias
correction (passes/fast_correction/onnx.py) and the sequential one (passes/sequential_correction/onnx.py), and int8-static as
the pipeline runs it by default (a real compress.run). Judged against the FP32 model
(techniques_report.py), each step timed. Writes docs/int8.md after a run of all models.

    make conformance      # first: the FP32 models under runs/conformance
    .venv/bin/python examples/conformance/techniques.py [--only NAME ...] [--calibration 64]
                                         [--sequential-feeds 16]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import compress  # noqa: E402
import techniques_report as report  # noqa: E402
from by_hand import outputs_of, quantize_by_hand  # noqa: E402
from corpus import CORPUS, INT8  # noqa: E402
from run import OUT as CONFORMANCE, slug  # noqa: E402

from compress.runner.checks import resolve_inputs  # noqa: E402
from compress.data.feeds import load_dataset  # noqa: E402
from compress.quant import equalize, float_pass, ranges  # noqa: E402
from compress.quant.passes.fast_correction import onnx as fast_bias  # noqa: E402
from compress.quant.passes.sequential_correction import onnx as bias_correction  # noqa: E402
from compress.quant.onnx_prep import opset_for  # noqa: E402
from compress.quant.ort_int8 import preprocess  # noqa: E402
from compress.quant.passes.onnx_backend import quantize_static_qdq  # noqa: E402
from compress.quant.schemes.int8_static import Int8Static  # noqa: E402
from runtimes.hostinfo import describe_host  # noqa: E402

WORK = HERE.parents[1] / "runs" / "techniques"
DOC = HERE.parents[1] / "docs" / "int8.md"
THREADS = os.cpu_count() or 1   # as the pipeline's steps use
# key -> (corpus entry, how it is judged: classifier, or the detector's output layout)
MODELS = {"efficientnet": ("EfficientNet-Lite0", "classifier"),
          "yolov8n": ("YOLOv8n detector", "yolov8"),
          "orientation": ("text orientation classifier", "classifier"),
          "ddddocr_det": ("OCR detector (YOLOX-style)", "yolox")}
# quantize_static alone, from a calibration cache: no ranges of its own, no bias
# correction, nearest rounding (what each technique row then adds is its own)
PLAIN = Int8Static(name="int8", bias_correction=False, weight_rounding="nearest")
JITTER = 1e-3   # the noise band: minmax ranges moved by up to +-0.1%


class StageContext:
    """What the quantize stage's functions read of a stage context: its folder, notes,
    progress bars and the calibration data."""

    def __init__(self, folder: Path, feeds: list):
        self.out_dir, self.progress, self._feeds = folder, self, feeds

    def note(self, text: str) -> None:
        print(f"   note: {text}", flush=True)

    def task(self, *_):
        return contextlib.nullcontext(lambda *a, **k: None)

    def require_dataset(self, *_):
        return self

    def take(self, count: int) -> list:
        return self._feeds[:count]


@dataclass
class Variant:
    name: str
    path: Path
    steps: dict                       # step -> seconds
    note: str = ""


@dataclass
class Bench:
    """One model: its FP32 file, the feeds, and the float model every technique starts
    from (the FP32 model prepared as int8-static prepares it: opset, quant_pre_process)."""
    kind: str
    fp32: Path
    calibration: list
    evaluation: list
    folder: Path
    prepared: Path | None = None
    ctx: StageContext | None = None
    prepare_seconds: float = 0.0
    sequential_feeds: int = 16

    def out(self, name: str) -> Path:
        return self.folder / f"{name}.onnx"


def fp32_of(entry) -> Path:
    """The FP32 ONNX file `make conformance` quantized for this entry (its run's report
    names each artifact's file)."""
    run = CONFORMANCE / slug(entry.name)
    try:
        artifacts = json.loads((run / "report.json").read_text())["artifacts"]
    except FileNotFoundError:
        raise SystemExit(f"no run of {entry.name} in {run}: run `make conformance` first")
    return run / next(a["path"] for a in artifacts if a["id"] == entry.fp32)


def bench_for(key: str, args) -> Bench:
    """The model, args.calibration feeds spread over its calibration data and all its
    evaluation feeds, read as the pipeline reads them."""
    name, kind = MODELS[key]
    entry = next(e for e in CORPUS if e.name == name)
    fp32 = fp32_of(entry)
    resolved = resolve_inputs(compress.pipeline(
        name=key, output=str(WORK), model={"onnx": str(fp32)}, data=entry.data(),
        stages=[INT8]))
    data = {role: load_dataset(resolved, role, resolved.model.inputs)
            for role in ("calibration", "evaluation")}
    calibration = [data["calibration"].feeds[i]
                   for i in data["calibration"].spread(args.calibration)]
    folder = WORK / key
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return Bench(kind, fp32, calibration, list(data["evaluation"].feeds), folder,
                 sequential_feeds=args.sequential_feeds)


def prepare(bench: Bench) -> float:
    """bench.prepared: the opset per-channel QDQ needs, then quant_pre_process."""
    started = time.perf_counter()
    bench.ctx = StageContext(bench.folder, bench.calibration)
    upgraded, _ = opset_for(bench.fp32, PLAIN, bench.ctx)
    bench.prepared = preprocess(upgraded, bench.folder, bench.ctx)
    return time.perf_counter() - started


def timed(fn, *args, **kwargs) -> tuple:
    started = time.perf_counter()
    return fn(*args, **kwargs), time.perf_counter() - started


def quantized(bench: Bench, float_model: Path, cache: Path, name: str) -> Variant:
    """quantize_static as int8-static calls it, with the ranges in `cache`."""
    target = bench.out(slug(name))
    _, seconds = timed(quantize_static_qdq, float_model, target, PLAIN, bench.ctx, ranges=cache)
    return Variant(name, target, {"quantize": seconds})


def ranged(bench: Bench, method: str, float_model: Path | None = None,
           name: str | None = None) -> Variant:
    """A range estimator's ranges (one pass of the float model), then quantize_static."""
    float_model, name = float_model or bench.prepared, name or method
    cache = bench.folder / f"{slug(name)}.json"
    estimate = ranges.estimate_ranges(float_model, bench.calibration, method, cache,
                                      threads=THREADS)
    variant = quantized(bench, float_model, cache, name)
    variant.steps = {"ranges": estimate.seconds, **variant.steps}
    return variant


def fast_corrected(bench: Bench, base: Variant) -> Variant:
    """Fast bias correction of `base`, kept whatever it does."""
    name = f"{base.name} + fast BC"
    done = fast_bias.correct_biases_fast(bench.prepared, base.path, bench.calibration,
                                         out_path=bench.out(slug(name)), threads=THREADS)
    return Variant(name, bench.out(slug(name)), {**base.steps, "fast BC": done.seconds},
                   f"{done.layers_corrected} layers")


def rounded(bench: Bench, base: Variant) -> list[Variant]:
    """GPTQ rounding of `base`'s weights, then fast bias correction of the rounded model,
    both from one pass of the float model (as int8-static makes them); kept whatever
    they do."""
    from compress.quant.passes.gptq_rounding import onnx as rounding
    started = time.perf_counter()
    float_model, qdq = onnx.load(str(bench.prepared)), onnx.load(str(base.path))
    seen = float_pass.layer_pass(float_model, qdq, bench.calibration, THREADS, hessians=True)
    done = rounding.round_weights(seen, qdq, float_model)
    out = [Variant(f"{base.name} + GPTQ", bench.out(slug(f"{base.name} + GPTQ")),
                   {**base.steps, "pass + GPTQ": time.perf_counter() - started},
                   f"{done.layers_rounded} layers, {done.weights_changed:.0%} of the weights moved")]
    onnx.save(qdq, str(out[0].path))
    started = time.perf_counter()
    fast_bias.shift_biases(seen, qdq, float_model)
    name = f"{base.name} + GPTQ + fast BC"
    out.append(Variant(name, bench.out(slug(name)),
                       {**out[0].steps, "fast BC": time.perf_counter() - started}, out[0].note))
    onnx.save(qdq, str(out[1].path))
    return out


def sequential(bench: Bench, base: Variant) -> Variant:
    """Sequential bias correction of `base` on some of the calibration feeds, spread over
    them: it runs the quantized model once per layer (64 feeds: up to 10 minutes here)."""
    name = f"{base.name} + sequential BC"
    step = max(1, len(bench.calibration) // bench.sequential_feeds)
    feeds = bench.calibration[::step][:bench.sequential_feeds]
    shutil.copy(base.path, bench.out(slug(name)))
    done, seconds = timed(bias_correction.correct_biases, bench.prepared,
                          bench.out(slug(name)), feeds, threads=THREADS)
    return Variant(name, bench.out(slug(name)), {**base.steps, "sequential BC": seconds},
                   f"{done['layers_corrected']} layers, {len(feeds)} feeds")


def equalized(bench: Bench) -> Variant:
    """Cross-layer equalization of the float model, then minmax ranges and quantize."""
    (model, done), seconds = timed(equalize.equalize, onnx.load(str(bench.prepared)))
    target = bench.out("equalized-float")
    onnx.save(model, str(target))
    variant = ranged(bench, "minmax", target, "CLE + minmax")
    variant.steps = {"CLE": seconds, **variant.steps}
    variant.note = (f"{done.pairs} pairs equalized, {done.skipped_bounded_clip} skipped "
                    "(bounded clip between)")
    return variant


def noise_band(bench: Bench, draws: int = 2) -> list[Variant]:
    """minmax with every range moved by up to +-JITTER, alone and with fast BC: how far
    noise alone moves the figures."""
    model = onnx.load(str(bench.prepared))
    stats = ranges.collect_stats(model, bench.calibration, 0, THREADS)
    found = ranges.pick_ranges(stats, "minmax", exact=tuple(o.name for o in model.graph.output))
    out = []
    for seed in range(draws):
        rng, cache = np.random.default_rng(seed), bench.folder / f"jitter{seed}.json"
        ranges.write_cache({name: (low * (1 + JITTER * rng.uniform(-1, 1)),
                                   high * (1 + JITTER * rng.uniform(-1, 1)))
                            for name, (low, high) in found.items()}, cache)
        out.append(quantized(bench, bench.prepared, cache,
                             f"minmax, ranges +-0.1% (draw {seed + 1})"))
        out.append(fast_corrected(bench, out[-1]))
    return out


def by_hand(bench: Bench) -> Variant:
    target = bench.out("by-hand")
    made = quantize_by_hand(bench.fp32, bench.calibration, target)
    upgraded = made["opset_upgraded"]
    note = "opset {from} -> {to} after a load error".format(**upgraded) if upgraded else ""
    return Variant("by hand (onnxruntime MinMax)", target,
                   {"pre-process + calibrate + quantize": made["seconds"]}, note)


def pipeline_default(bench: Bench) -> Variant:
    """int8-static with its defaults through compress.run, on the same feeds."""
    result = compress.run(compress.pipeline(
        name="default", output=str(bench.folder), model={"onnx": str(bench.fp32)},
        data={"calibration": bench.calibration},
        stages=[{**INT8, "samples": len(bench.calibration)}]))
    artifact = next(a for a in result.artifacts if a.id == INT8["name"])
    meta, checked = artifact.meta, artifact.meta.get("bias_correction") or {}
    note = ("kept {}; calibration SQNR: {}".format(checked["kept"], ", ".join(
        f"{name} {sqnr} dB" for name, sqnr in checked["calibration_sqnr_db"].items()))
        if "kept" in checked else json.dumps(checked))
    return Variant("pipeline default (int8-static)", result.run_dir / artifact.path,
                   {"stage": meta["seconds"]}, note)


def variants(bench: Bench):
    """Every variant of one model, in the table's order, as each is made."""
    yield by_hand(bench)
    bench.prepare_seconds = prepare(bench)
    minmax = ranged(bench, "minmax")
    yield minmax
    yield from (ranged(bench, method) for method in ("mean_minmax", "mse"))
    percentile = ranged(bench, "percentile")
    yield percentile
    yield equalized(bench)
    yield fast_corrected(bench, minmax)
    yield fast_corrected(bench, percentile)
    yield from rounded(bench, minmax)
    yield sequential(bench, minmax)
    yield pipeline_default(bench)
    yield from noise_band(bench)


def measure(key: str, args) -> dict:
    """One model's variants, each judged against the FP32 model on the evaluation feeds."""
    bench = bench_for(key, args)
    reference = outputs_of(bench.fp32, bench.evaluation)
    rows = []
    for variant in variants(bench):
        scores = report.scores(bench.kind, outputs_of(variant.path, bench.evaluation), reference)
        rows.append({"name": variant.name, "steps": variant.steps, "note": variant.note,
                     **scores})
        print(f"   {json.dumps(rows[-1], default=float)}", flush=True)
    return {"key": key, "name": MODELS[key][0], "kind": bench.kind,
            "fp32": str(bench.fp32.relative_to(HERE.parents[1])),
            "calibration": len(bench.calibration), "evaluation": len(bench.evaluation),
            "prepare_seconds": bench.prepare_seconds, "rows": rows}


FLOOR = "\n## The fidelity floor and recovery\n"


def floor_section() -> str:
    """docs/int8.md's section on the fidelity floor, kept as it is: its numbers come from
    examples/conformance/floor.py, not from this run."""
    text = DOC.read_text() if DOC.exists() else ""
    return text[text.index(FLOOR):] if FLOOR in text else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(MODELS), help="these models")
    parser.add_argument("--calibration", type=int, default=64,
                        help="calibration feeds, spread over each model's calibration data")
    parser.add_argument("--sequential-feeds", type=int, default=16,
                        help="of those, for the sequential bias correction")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's pre-processing advice
    started, results = time.perf_counter(), []
    for key in args.only or MODELS:
        print(f"== {MODELS[key][0]}", flush=True)
        results.append(measure(key, args))
    elapsed = time.perf_counter() - started
    (WORK / "results.json").write_text(json.dumps(results, indent=1, default=float))
    command = "python examples/conformance/techniques.py" + "".join(
        f" --{flag.replace('_', '-')} {value}" for flag, value in vars(args).items()
        if flag != "only" and value != parser.get_default(flag))
    text = report.render(results, command, elapsed, describe_host(), time.strftime("%Y-%m-%d"))
    if not args.only:  # the document holds every model, never a part of them
        DOC.write_text(text + floor_section())
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
