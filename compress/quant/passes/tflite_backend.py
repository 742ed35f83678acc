"""The TFLite backend of the INT8 runner (runner.py): full-int8 files from a float .tflite
file. ai-edge-quantizer is the quantizer, once per activation range estimator
(export.tflite.RANGES: its moving average, and the extremes); the passes on the quantized
layers make the candidates of each file (tflite_candidates.py); the check runs each on
CHECK_FEEDS of the calibration feeds against the float file's outputs and keeps one by
the check's rule, with this format's margin (FIT_MARGIN_DB). Which wins depends on the
model (docs/tflite.md). The run keeps what the fidelity floor (fidelity_floor/tflite.py) works
from: each file's activation ranges, the candidate kept, the check's feeds and scores.

    write_int8(fp32, target, calibration, settings, ctx) -> meta
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from compress.quant.passes.base import LAYERS
from compress.quant.passes.check import CHECK_FEEDS, keep, refining, spread

# No margin: the TFLite check keeps the highest score, fitted or not. Measured: CREPE's
# check kept average+bias (24.86 dB on the calibration feeds, against 24.70 as quantized;
# 24.87 and 24.48 dB on the evaluation feeds), which the ONNX backend's 0.5 dB would have
# thrown away; EfficientNet-Lite0's kept minmax+gptq+bias won by 5.4 dB (docs/tflite.md).
FIT_MARGIN_DB = 0.0


@dataclass(frozen=True)
class Int8Settings:
    """What the stage asks of the int8 file."""
    ranges: str                 # a name in export.tflite.RANGES, or "auto": each, checked
    bias_correction: str | None  # checked, fast, sequential, or None (off)
    weight_rounding: str        # nearest or gptq
    samples: int                # calibration feeds for the correction and the rounding
    floor_db: float | None = None  # the fidelity floor (passes/fidelity_floor/); None: off
    recover: bool = True        # below the floor, recover by mixed precision

    def bias_method(self) -> str | None:
        """The bias correction run, as the passes read it from either stage's settings."""
        return self.bias_correction


def pairs(settings: Int8Settings) -> list[tuple[str, bool]]:
    """The (rounding, corrected) variants of each quantized file."""
    roundings = ["nearest"] + ["gptq"] * (settings.weight_rounding == "gptq")
    if settings.bias_correction == "checked":
        return [(r, corrected) for r in roundings for corrected in (False, True)]
    return [(settings.weight_rounding, settings.bias_correction == "fast")]


def label(ranges: str, rounding: str, corrected: bool) -> str:
    """A candidate's name in the meta: "minmax+gptq+bias"."""
    return "+".join([ranges] + ["gptq"] * (rounding == "gptq") + ["bias"] * corrected)


def write_int8(fp32: Path, target: Path, calibration: list[dict], settings: Int8Settings,
               ctx) -> dict:
    """Write `target`; what goes into the artifact's meta."""
    from compress.quant.passes.runner import run
    return run(TfliteRun(fp32, target, calibration, settings, ctx))


def quantized_files(fp32: Path, calibration: list[dict], settings: Int8Settings,
                    folder: Path) -> tuple[dict[str, bytes], dict[str, dict]]:
    """ai-edge-quantizer's file for each range estimator asked for, written in `folder`,
    and the activation ranges each was quantized with (by estimator)."""
    from export.tflite import RANGES, converter_logs_hidden, quantize_int8
    names = list(RANGES) if settings.ranges == "auto" else [settings.ranges]
    files = {name: folder / f"{name}.tflite" for name in names}
    with converter_logs_hidden():
        ranges = quantize_int8(fp32, files, calibration)
    return {name: path.read_bytes() for name, path in files.items()}, ranges


def layer_candidates(fp32: Path, files: dict[str, bytes], calibration: list[dict],
                     settings: Int8Settings, progress=None) -> tuple[dict[tuple, bytes], dict]:
    """Every candidate's bytes by (ranges, rounding, corrected), and the report of the
    rounding and correction (what was done to each candidate in its "candidates"): one
    float pass serves every range estimator's file. `progress`: the run's (its task()
    shows the pass)."""
    from compress.quant.passes.runner import plan
    from compress.quant.passes.tflite_candidates import variants
    wanted = pairs(settings)
    if wanted == [("nearest", False)]:
        return {(name, "nearest", False): content for name, content in files.items()}, {}
    feeds = spread(calibration, settings.samples)
    made = plan(settings, "tflite")
    titles = [p.backends["tflite"].title(settings) for p in made.at(LAYERS)]
    both = f", activation_ranges {'+'.join(files)}" if len(files) > 1 else ""
    said = refining(titles, made.checked, len(feeds), both)
    task = progress.task(said, None) if progress else contextlib.nullcontext(lambda n: None)
    with task as advance:
        return variants(fp32.read_bytes(), files, feeds, wanted, threads=os.cpu_count() or 1,
                        advance=advance)


def make_candidates(fp32: Path, calibration: list[dict], settings: Int8Settings,
                    folder: Path, progress=None) -> tuple[dict[tuple, bytes], dict]:
    """quantized_files, then layer_candidates: the stage's candidates, made apart."""
    files, _ = quantized_files(fp32, calibration, settings, folder)
    return layer_candidates(fp32, files, calibration, settings, progress)


def _meta(settings: Int8Settings, report: dict, kept: tuple) -> dict:
    """The rounding and correction of the file kept (not of the other candidates)."""
    if not report:
        return {"weight_rounding": {"method": settings.weight_rounding}}
    done = report["candidates"][kept]
    rounded = ({k: done.get(k, 0) for k in ("layers_rounded", "weights_changed")}
               if settings.weight_rounding == "gptq" else {})
    meta = {"weight_rounding": {"method": settings.weight_rounding, **rounded,
                                **{k: report[k] for k in ("rounding_seconds",) if k in report}}}
    if settings.bias_correction in ("checked", "fast"):
        meta["bias_correction"] = {
            "method": settings.bias_correction, "samples": report["samples"],
            "seconds": report.get("seconds"), "layers_corrected": done.get("layers_corrected", 0),
            **{k: done[k] for k in ("largest_mean_shift",) if k in done}}
    return meta


def scores(candidates: dict, feeds: list[dict], reference: list, folder: Path) -> dict:
    """Each candidate's output SQNR (dB, the worst output) against `reference`, the
    float file's outputs on `feeds`."""
    from compress.model.run import run_feeds
    from runtimes.metrics import feed_fidelity
    found = {}
    with tempfile.TemporaryDirectory(dir=folder, prefix=".check-") as scratch:
        for name, content in candidates.items():
            path = Path(scratch) / "candidate.tflite"
            path.write_bytes(content)
            found[name] = round(feed_fidelity(run_feeds(path, None, feeds), reference)["sqnr_db"], 2)
    return found


class TfliteRun:
    """One full-int8 run on a float .tflite file: the runner's steps for TFLite."""
    name = "tflite"
    margin = FIT_MARGIN_DB

    def __init__(self, fp32: Path, target: Path, calibration: list[dict],
                 settings: Int8Settings, ctx):
        self.fp32, self.target, self.calibration = fp32, target, calibration
        self.settings, self.ctx = settings, ctx
        self.files: dict[str, bytes] = {}
        self.ranges: dict[str, dict] = {}   # each file's activation ranges, by estimator
        self.kept: tuple = ()               # the candidate kept: (ranges, rounding, corrected)
        self.scored: dict = {}              # sha256 of a file -> its check score
        self._check_feeds = None
        self.meta: dict = {}

    def quantize(self, ranges: list, plan) -> None:
        with tempfile.TemporaryDirectory(dir=self.target.parent, prefix=".int8-") as folder:
            self.files, self.ranges = quantized_files(self.fp32, self.calibration,
                                                      self.settings, Path(folder))

    def check_feeds(self) -> tuple[list, list]:
        """The check's feeds (CHECK_FEEDS of the calibration feeds) and the float file's
        outputs on them."""
        if self._check_feeds is None:
            from compress.model.run import run_feeds
            feeds = spread(self.calibration, CHECK_FEEDS)
            self._check_feeds = feeds, run_feeds(self.fp32, None, feeds)
        return self._check_feeds

    def score_of(self, content: bytes) -> float:
        """The check's score of `content`: as the check scored these very bytes, else now."""
        digest = hashlib.sha256(content).digest()
        if digest not in self.scored:
            self.scored[digest] = scores({"": content}, *self.check_feeds(),
                                         self.target.parent)[""]
        return self.scored[digest]

    def check(self, passes: list, plan) -> None:
        """Every candidate the passes on the layers make of every file; where there are
        several, the one the check keeps (the highest score, FIT_MARGIN_DB)."""
        candidates, report = layer_candidates(self.fp32, self.files, self.calibration,
                                              self.settings, self.ctx.progress)
        kept = next(iter(candidates))
        if len(candidates) > 1:
            found = scores(candidates, *self.check_feeds(), self.target.parent)
            self.scored.update({hashlib.sha256(candidates[k]).digest(): v
                                for k, v in found.items()})
            fitted = {key for key in found if key[1] == "gptq" or key[2]}
            kept = keep(found, fitted, FIT_MARGIN_DB)
            self.meta["check"] = {
                "kept": label(*kept), "check_feeds": min(CHECK_FEEDS, len(self.calibration)),
                "calibration_sqnr_db": {label(*k): v for k, v in found.items()}}
        self.kept = kept
        self.target.write_bytes(candidates[kept])
        self.meta.update(_meta(self.settings, report, kept), ranges=kept[0])

    def graph(self, each) -> None:
        backend = each.backends[self.name]
        self.meta[backend.record] = backend.apply(self)

    def finish(self) -> dict:
        return self.meta
