"""The ONNX backend of the INT8 runner (runner.py), int8-static's way through onnxruntime:
quantize_static is the quantizer (ort_int8.py); the one float pass is float_pass.py's,
made by the run that finds quantize_static's MinMax ranges where it can stand for
onnxruntime's calibration (calibrating_pass), then by its layer_pass on the quantized
graph; the check scores each candidate in onnxruntime, in memory, on CHECK_FEEDS of the
float pass's feeds against the outputs that pass took. Measured on the conformance
corpus: docs/int8.md, docs/rounding.md.

    quantize_static_qdq(source, target, config, ctx, exclude, ranges) -> meta
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

from compress.quant.passes.check import CHECK_FEEDS, Checked, keep, refining, spread

# What a candidate fitted on the check's own feeds (bias-corrected, GPTQ-rounded) must
# score above the model as quantize_static wrote it to replace it: fitted on those feeds,
# it scores higher there than on others. The text orientation classifier's rounded model
# scored 0.27 dB above the unrounded one on the check and 2.8 dB below it on the
# evaluation feeds. Where the kept candidate was fitted, it won the check by 0.64 dB
# (CREPE), 2.2 dB (YOLOv8n) and 5.9 dB (EfficientNet-Lite0), and the evaluation feeds
# agreed (+1.4, +2.0, +6.6 dB; docs/rounding.md, "The check").
FIT_MARGIN_DB = 0.5
AS_QUANTIZED = "as quantized"   # the check's candidate without any pass
AS_IS = "as is"                 # the model kept before a pass on the quantized graph


def quantize_static_qdq(source: Path, target: Path, config, ctx, exclude: tuple = (),
                        ranges: Path | None = None) -> dict:
    """QDQ int8 with calibrated activation ranges and int8-static's passes. `ranges`: a
    calibration cache file shared by several calls on the same model (the accuracy-aware
    search quantizes it once per attempt): the first call calibrates and writes it,
    later ones read it."""
    from compress.quant.passes.runner import run
    return run(OnnxRun(source, target, config, ctx, exclude, ranges))


def beside_onnxruntime():
    """One BLAS thread while numpy runs beside onnxruntime (the float pass's H products
    beside the float model's runs, GPTQ beside the check's): BLAS's own threads on top of
    onnxruntime's oversubscribed the cores (YOLOv8n's GPTQ beside the check 1.6 -> 1.2 s,
    its stage 6.8-7.3 -> 6.3 s; docs/rounding.md). GPTQ alone keeps BLAS's threads
    (EfficientNet-Lite0's 0.80 s against 0.94 s on one). The setting is the process's,
    restored after."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(1, user_api="blas")


def _scores(candidates: dict[str, bytes], feeds: list[dict], reference: list) -> dict[str, float]:
    """Each candidate model's output SQNR (dB) against the float outputs."""
    from compress.quant.float_probe import session
    from runtimes.metrics import feed_fidelity
    scores = {}
    for name, model in candidates.items():
        run = session(model, os.cpu_count() or 1)
        outputs = [run.run(None, feed) for feed in feeds]
        scores[name] = round(feed_fidelity(outputs, reference)["sqnr_db"], 2)
    return scores


@dataclass
class OnnxLayers:
    """A candidate of the passes on the quantized layers: the QDQ model, which they change
    in place, with the float pass's layer statistics and the float model they pair with."""
    model: object
    seen: object           # float_pass.LayerPass
    float_model: object
    feeds: int             # the feeds the statistics were taken on


class OnnxRun:
    """One int8-static run on an ONNX file: the runner's steps for ONNX."""
    name = "onnx"
    margin = FIT_MARGIN_DB

    def __init__(self, source: Path, target: Path, config, ctx, exclude: tuple,
                 cache: Path | None):
        self.settings, self.ctx, self.source, self.target = config, ctx, source, target
        self.feeds = ctx.require_dataset("calibration", "int8-static quantization").take(
            config.samples)
        # the feeds the float pass takes its statistics on, as indices into self.feeds
        self.chosen = spread(list(range(len(self.feeds))), config.bias_correction_samples)
        self.excluded = list(config.exclude_nodes) + list(exclude)
        self.shared = cache is not None
        self.cache = cache or target.parent / "calibration_ranges.json"
        self.known = None      # float_pass.Calibrated, where the calibrating run was made
        self.checked = None    # check.Checked, where the check ran
        self.scored: dict[bytes, float] = {}   # the check's score of a model, by its digest
        self._check_feeds = None               # (feeds, float outputs), once made
        self.made: list[Path] = []
        self.meta = {"calibration": config.calibration, "calibration_samples": len(self.feeds)}

    def chosen_feeds(self) -> list[dict]:
        return [self.feeds[i] for i in self.chosen]

    def check_feeds(self) -> tuple[list, list]:
        """The check's feeds (CHECK_FEEDS of the chosen ones) and the float model's
        outputs on them: from the calibrating run where it took them, else one run."""
        if self._check_feeds is None:
            from compress.quant.passes.fidelity_floor.mixed_precision import float_outputs
            chosen = self.chosen_feeds()
            picks = spread(list(range(len(chosen))), CHECK_FEEDS)
            known = self.known.outputs if self.known is not None else None
            feeds = [chosen[i] for i in picks]
            self._check_feeds = feeds, ([known[i] for i in picks] if known else
                                        float_outputs(self.source.read_bytes(), feeds,
                                                      os.cpu_count() or 1))
        return self._check_feeds

    def score_of(self, model: bytes) -> float:
        """The check's score of `model` (output SQNR against the float model on the
        check's feeds): as the check or a judged pass scored these very bytes, else
        scored now."""
        digest = hashlib.sha256(model).digest()
        if digest not in self.scored:
            self.scored[digest] = _scores({"": model}, *self.check_feeds())[""]
        return self.scored[digest]

    def _remember(self, candidates: dict, scores: dict) -> None:
        self.scored.update({hashlib.sha256(candidates[name]).digest(): scores[name]
                            for name in candidates if scores.get(name) is not None})

    def judged(self, each, before: bytes, after: bytes, feeds: list[dict],
               reference: list) -> Checked:
        """A pass on the quantized graph judged alone: its model (`after`) against the one
        kept before it (`before`, as the check scored it where it did) on CHECK_FEEDS of
        `feeds`, by the check's rule."""
        picks = spread(list(range(len(feeds))), CHECK_FEEDS)
        known = self.checked.kept_score() if self.checked else None
        candidates = {each.label: after, **({AS_IS: before} if known is None else {})}
        scores = _scores(candidates, [feeds[i] for i in picks], [reference[i] for i in picks])
        self._remember(candidates, scores)
        scores = {AS_IS: known, **scores} if known is not None else scores
        fitted = {each.label} if each.fitted else set()
        return Checked(keep({AS_IS: scores[AS_IS], each.label: scores[each.label]}, fitted,
                            self.margin), scores)

    def record(self, key: str, meta: dict) -> None:
        if key == "bias_correction" and key not in self.meta:
            # what was done to the layers opens with the rounding (nearest: GPTQ off)
            self.meta[key] = {"weight_rounding": self.settings.weight_rounding}
        self.meta.setdefault(key, {}).update(meta)

    def rewrite(self, each) -> None:
        backend = each.backends[self.name]
        self.source, meta = backend.rewrite(self)
        self.made.append(self.source)
        self.record(backend.record, meta)

    def quantize(self, ranges: list, plan) -> None:
        from compress.quant import outer_scope
        from compress.quant.ort_int8 import StaticInputs, run_quantize_static
        if not self.cache.is_file():
            for each in ranges:
                self.meta.update(each.backends[self.name].ranges(self, self.cache))
            if not ranges:
                self.known = self._calibrating(plan)
        run_quantize_static(StaticInputs(self.source, self.target, self.feeds, self.excluded,
                                         self.cache), self.settings, self.ctx)
        rewired = outer_scope.repair(self.target, self.ctx.progress)
        if rewired:
            self.meta["outer_scope_rewired"] = rewired
        if not self.shared:
            self.cache.unlink(missing_ok=True)

    def _calibrating(self, plan):
        """Where the stage makes the float pass anyway and calibrates with MinMax on 8-bit
        types: one run of the float model over the calibration feeds finds quantize_static's
        ranges (written to the cache, which it then reads) and takes what the pass needs
        that does not depend on them (float_pass.calibrating_pass); onnxruntime's own
        calibration run is not made. None where the stage calibrates as before. Where the
        ranges cannot stand for onnxruntime's (Calibrated.minmax), no cache is written
        and quantize_static calibrates itself."""
        config = self.settings
        if not plan.needs.layers or config.calibration != "minmax" or config.qnn \
                or {config.activations, config.weights} - {"uint8", "int8"}:
            return None
        import onnx

        from compress.quant.float_pass import Chosen, calibrating_pass
        from compress.quant.ranges import write_cache
        model = onnx.load(str(self.source))
        channels = [name for each in plan.passes if each.needs(config).channels
                    for name in each.backends[self.name].channel_tensors(model)]
        with self.ctx.progress.task(f"calibrating (minmax, {len(self.feeds)} samples) and "
                                    "gathering what the refinements read", len(self.feeds)) \
                as advance, beside_onnxruntime():
            chosen = Chosen(self.chosen, plan.needs.hessians, plan.needs.outputs)
            found = calibrating_pass(model, self.feeds, chosen, os.cpu_count() or 1,
                                     advance=advance, channels=channels)
        ranges = found.minmax()
        if ranges is not None:
            write_cache(ranges, self.cache)
        return found

    def check(self, passes: list, plan) -> None:
        """The passes on the quantized layers from one pass of the float model (or what
        the calibrating run took) over the chosen feeds: judged by the check where the
        settings leave them to it, else applied in order."""
        if not passes:
            return
        import onnx

        from compress.quant.float_pass import layer_pass
        feeds = self.chosen_feeds()
        titles = [each.backends[self.name].title(self.settings) for each in passes]
        with self.ctx.progress.task(refining(titles, plan.checked, len(feeds)), None):
            float_model, qdq = onnx.load(str(self.source)), onnx.load(str(self.target))
            # after the calibrating run, what it took and a run for the quantized means
            run_pass = layer_pass if self.known is None else self.known.layer_pass
            with beside_onnxruntime():
                seen = run_pass(float_model, qdq, feeds, os.cpu_count() or 1,
                                hessians=plan.needs.hessians, outputs=plan.needs.outputs)
            work = OnnxLayers(qdq, seen, float_model, len(feeds))
            if plan.checked:
                self.meta["bias_correction"] = self._checked(passes, work, feeds)
                return
            for each in passes:
                self.record(each.backends[self.name].record, each.backends[self.name].apply(work))
            onnx.save(qdq, str(self.target))

    def _checked(self, passes: list, work: OnnxLayers, feeds: list[dict]) -> dict:
        """Of the model as quantize_static wrote it and the candidates the passes make,
        keep the one whose outputs are closest to the float model's on CHECK_FEEDS of the
        feeds. A pass made beside the check (GPTQ: a second thread while the candidates
        without it are scored; onnxruntime lets the GIL go while it runs) is scored once,
        with each other pass that scored at least the model as quantized: on the six
        corpus models run with all four, the rounded one the other way round never came
        first (docs/rounding.md), and a fourth candidate after the rounding was ~0.5 s of
        YOLOv8n's stage. Each candidate is kept serialized: the bytes both the check's
        session and the file take."""
        from concurrent.futures import ThreadPoolExecutor
        beside = [p for p in passes if getattr(p.backends[self.name], "beside_check", False)]
        alone = [p for p in passes if p not in beside]
        candidates = {AS_QUANTIZED: work.model.SerializeToString()}
        for each in alone:
            candidates[each.label] = self._alone(each, work, candidates[AS_QUANTIZED])
        picks = spread(list(range(len(feeds))), CHECK_FEEDS)
        check = [feeds[i] for i in picks], [work.seen.outputs[i] for i in picks]
        meta = {"method": "fast", "weight_rounding": self.settings.weight_rounding}
        with ThreadPoolExecutor(1) as worker, beside_onnxruntime():
            made = worker.submit(self._apply, beside, work) if beside else None
            scores = _scores(candidates, *check)
            if made is not None:
                meta.update(made.result())
                won = [p for p in alone if scores[p.label] >= scores[AS_QUANTIZED]]
                self._apply(won, work)
                name = "+".join(p.label for p in beside + won)
                candidates[name] = work.model.SerializeToString()
                scores.update(_scores({name: candidates[name]}, *check))
        kept = keep(scores, set(candidates) - {AS_QUANTIZED}, self.margin)
        self._remember(candidates, scores)
        if kept != AS_QUANTIZED:
            self.target.write_bytes(candidates[kept])
        self.checked = Checked(kept, scores)
        return {**meta, "kept": kept, "check_feeds": len(picks), "calibration_sqnr_db": scores,
                "layers_corrected": len(work.seen.pairs), "layers_skipped": work.seen.skipped,
                "feeds": len(feeds)}

    def _alone(self, each, work: OnnxLayers, quantized: bytes) -> bytes:
        """The model as quantized with `each` alone, made before a pass beside the check
        changes the layer statistics (GPTQ writes its W_q into them)."""
        import onnx
        copy = replace(work, model=onnx.load_model_from_string(quantized))
        each.backends[self.name].apply(copy)
        return copy.model.SerializeToString()

    def _apply(self, passes: list, work: OnnxLayers) -> dict:
        meta = {}
        for each in passes:
            meta.update(each.backends[self.name].apply(work))
        return meta

    def graph(self, each) -> None:
        backend = each.backends[self.name]
        meta = backend.apply(self)
        if meta is not None:
            self.record(backend.record, meta)

    def finish(self) -> dict:
        for path in self.made:
            path.unlink()
        return self.meta
