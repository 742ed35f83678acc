"""The steps int8-static adds around onnxruntime's quantize_static: cross-layer
equalization before it (equalize.py), activation ranges of our own (ranges.py: written
as the calibration cache quantize_static reads) or onnxruntime's MinMax ranges found by
the float pass's own run (float_pass.calibrating_pass), and after it GPTQ weight
rounding (rounding.py) and bias correction, fast (fast_bias.py) or sequential
(bias_correction.py), with the check that keeps the best candidate. Measured on the
conformance corpus: docs/int8.md, docs/rounding.md."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

# the estimators quantize_static does not have (ranges.py computes them in one pass)
OWN_RANGES = ("mean_minmax", "mse")


def equalized(source: Path, config, folder: Path) -> tuple[Path, dict | None]:
    """`source` equalized into `folder` (the float model quantize_static then takes,
    and bias correction compares with), or `source` itself when not asked."""
    if not config.equalize:
        return source, None
    import onnx

    from compress.quant.equalize import equalize
    model, report = equalize(onnx.load(str(source)))
    target = folder / "equalized.onnx"
    onnx.save(model, str(target))
    return target, dataclasses.asdict(report)


def own_ranges(source: Path, feeds: list[dict], config, cache: Path) -> dict:
    """The ranges of `config.calibration` written to `cache` for quantize_static."""
    from compress.quant.ranges import estimate_ranges
    report = estimate_ranges(source, feeds, config.calibration, cache,
                             threads=os.cpu_count() or 1)
    return {"ranges_seconds": round(report.seconds, 3), "ranges_tensors": report.tensors}


def spread(feeds: list[dict], count: int) -> list[dict]:
    """At most `count` of `feeds`, evenly spread over them (in order)."""
    picks = np.unique(np.linspace(0, len(feeds) - 1, min(count, len(feeds))).astype(int))
    return [feeds[i] for i in picks]


CHECK_FEEDS = 32  # calibration feeds each candidate of the check is run on
# What a candidate fitted on the check's own feeds (bias-corrected, GPTQ-rounded) must
# score above the model as quantize_static wrote it to replace it: fitted on those feeds,
# it scores higher there than on others. The text orientation classifier's rounded model
# scored 0.27 dB above the unrounded one on the check and 2.8 dB below it on the
# evaluation feeds. Where the kept candidate was fitted, it won the check by 0.64 dB
# (CREPE), 2.2 dB (YOLOv8n) and 5.9 dB (EfficientNet-Lite0), and the evaluation feeds
# agreed (+1.4, +2.0, +6.6 dB; docs/rounding.md, "The check").
FIT_MARGIN_DB = 0.5


def beside_onnxruntime():
    """One BLAS thread while numpy runs beside onnxruntime (the float pass's H products
    beside the float model's runs, GPTQ beside the check's): BLAS's own threads on top of
    onnxruntime's oversubscribed the cores (YOLOv8n's GPTQ beside the check 1.6 -> 1.2 s,
    its stage 6.8-7.3 -> 6.3 s; docs/rounding.md). GPTQ alone keeps BLAS's threads
    (EfficientNet-Lite0's 0.80 s against 0.94 s on one). The setting is the process's,
    restored after."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(1, user_api="blas")


def _passes(config) -> tuple[str | None, bool, bool]:
    """(bias method, GPTQ rounding, whether they take the one float pass)."""
    method, rounding = config.bias_method(), config.weight_rounding == "gptq"
    return method, rounding, rounding or method in ("fast", "checked")


def calibrating_run(source: Path, feeds: list[dict], config, cache: Path, ctx):
    """Where the stage makes the float pass anyway and calibrates with MinMax on 8-bit
    types: one run of the float model over the calibration feeds finds quantize_static's
    ranges (written to `cache`, which it then reads) and takes what the pass needs that
    does not depend on them (float_pass.calibrating_pass); onnxruntime's own
    calibration run is not made. The run's float_pass.Calibrated, or None where the
    stage calibrates as before. Where the ranges cannot stand for onnxruntime's
    (Calibrated.minmax), no cache is written and quantize_static calibrates itself."""
    method, rounding, one_pass = _passes(config)
    if not one_pass or config.calibration != "minmax" or config.qnn \
            or {config.activations, config.weights} - {"uint8", "int8"}:
        return None
    import onnx

    from compress.quant.float_pass import calibrating_pass
    from compress.quant.ranges import write_cache
    chosen = spread(list(range(len(feeds))), config.bias_correction_samples)
    model = onnx.load(str(source))
    with ctx.progress.task(f"calibrating (minmax, {len(feeds)} feeds) and the float pass",
                           len(feeds)) as advance, beside_onnxruntime():
        found = calibrating_pass(model, feeds, chosen, os.cpu_count() or 1, hessians=rounding,
                                 outputs=method == "checked", advance=advance,
                                 channels=_swish_tensors(model, config))
    ranges = found.minmax()
    if ranges is not None:
        write_cache(ranges, cache)
    return found


def round_and_correct(source: Path, target: Path, feeds: list[dict], config, ctx,
                      known=None) -> dict | None:
    """Weight rounding (config.weight_rounding) and bias correction (config.bias_method())
    of the QDQ model at `target`, from one pass of the float model `source` (or what
    calibrating_run took, `known`); what went into the artifact's meta (None when both
    are off)."""
    method, rounding, one_pass = _passes(config)
    if method is None and not rounding:
        return None
    # the calibrating run took its statistics on these feeds: the quantized means must be
    # taken on the same ones
    chosen = ([feeds[i] for i in known.chosen] if known is not None
              else spread(feeds, config.bias_correction_samples))
    meta = {"weight_rounding": config.weight_rounding}
    if one_pass:
        import onnx

        from compress.quant import fast_bias
        from compress.quant.float_pass import layer_pass
        fast = method in ("fast", "checked")
        what = " + ".join(["GPTQ rounding"] * rounding + [f"bias correction ({method})"] * fast)
        with ctx.progress.task(f"{what}, {len(chosen)} feeds", None):
            float_model, qdq = onnx.load(str(source)), onnx.load(str(target))
            with beside_onnxruntime():
                seen = layer_pass(float_model, qdq, chosen, os.cpu_count() or 1,
                                  hessians=rounding, outputs=method == "checked", known=known)
            if method == "checked":
                return _checked(seen, float_model, qdq, target, chosen, rounding)
            if rounding:
                meta.update(_rounding_meta(seen, qdq, float_model))
            if method == "fast":
                largest = fast_bias.shift_biases(seen, qdq, float_model)
                meta.update(method=method, layers_corrected=len(seen.pairs), feeds=len(chosen),
                            largest_shift=largest)
            onnx.save(qdq, str(target))
    if method == "sequential":
        from compress.quant.bias_correction import correct_biases as sequential
        with ctx.progress.task(f"bias correction ({len(chosen)} feeds)", None) as advance:
            meta.update(method=method, **sequential(source, target, chosen,
                                                    threads=os.cpu_count() or 1, advance=advance))
    return meta


def _rounding_meta(seen, qdq, float_model) -> dict:
    from compress.quant.rounding import round_weights
    report = round_weights(seen, qdq, float_model)
    return {"layers_rounded": report.layers_rounded, "weights_changed": report.weights_changed,
            "rounding_seconds": round(report.seconds, 3)}


def _checked(seen, float_model, qdq, target: Path, feeds: list[dict], rounding: bool) -> dict:
    """The default: of the model as quantize_static wrote it, with the fast bias
    correction, and GPTQ-rounded, keep the one whose outputs are closest to the float
    model's (SQNR) on CHECK_FEEDS of the feeds. The correction helped most models of the
    corpus and cost some (ddddocr's detector, the orientation classifier); the check told
    them apart on all of them. GPTQ rounds in a second thread while the two unrounded
    candidates are scored (onnxruntime lets the GIL go while it runs); the rounded model
    is then scored once, corrected only if the correction beat the unrounded model: on
    the six corpus models run with all four, the rounded one the other way round never
    came first (docs/rounding.md), and a fourth candidate after the rounding was ~0.5 s
    of YOLOv8n's stage. A fitted candidate replaces the model as quantized only by more
    than FIT_MARGIN_DB. Each candidate is kept serialized: the bytes both the check's
    session and the file take."""
    from concurrent.futures import ThreadPoolExecutor

    import onnx

    from compress.quant import fast_bias
    candidates = {"as quantized": qdq.SerializeToString()}
    corrected = onnx.load_model_from_string(candidates["as quantized"])
    fast_bias.shift_biases(seen, corrected, float_model)
    candidates["bias"] = corrected.SerializeToString()
    meta = {"method": "fast", "weight_rounding": "gptq" if rounding else "nearest"}
    picks = spread(list(range(len(feeds))), CHECK_FEEDS)
    check = [feeds[i] for i in picks], [seen.outputs[i] for i in picks]
    with ThreadPoolExecutor(1) as worker, beside_onnxruntime():
        # rounding writes the new W_q into qdq and seen.pairs: both candidates above are
        # already serialized
        rounded = worker.submit(_rounding_meta, seen, qdq, float_model) if rounding else None
        scores = _scores(candidates, *check)
        if rounded is not None:
            meta.update(rounded.result())
            name = "gptq"
            if scores["bias"] >= scores["as quantized"]:
                fast_bias.shift_biases(seen, qdq, float_model)
                name = "gptq+bias"
            candidates[name] = qdq.SerializeToString()
            scores.update(_scores({name: candidates[name]}, *check))
    kept = max(scores, key=lambda name: scores[name] - (name != "as quantized") * FIT_MARGIN_DB)
    if kept != "as quantized":
        target.write_bytes(candidates[kept])
    return {**meta, "kept": kept, "check_feeds": len(picks), "calibration_sqnr_db": scores,
            "layers_corrected": len(seen.pairs), "layers_skipped": seen.skipped,
            "feeds": len(feeds)}


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


def _swish_off(config) -> bool:
    """Hard-swish equalization not made: turned off, or a zero point that must stay where
    it is (symmetric activations, QNN's types), which widening the product's range moves."""
    return config.equalize_hard_swish is False or config.symmetric_activations or config.qnn


def _swish_tensors(model, config) -> list[str]:
    """The tensors whose per-channel ranges hard-swish equalization will need."""
    if _swish_off(config):
        return []
    from compress.quant.swish_equalize import float_tensors
    return float_tensors(model)


def swish_equalized(source: Path, target: Path, feeds: list[dict], config, ctx,
                    checked: dict | None = None, known=None) -> dict | None:
    """Channel equalization through hard-swish into depthwise convolutions
    (swish_equalize.py) on the QDQ model at `target`. The per-channel ranges and the
    float outputs the equalized file is scored against on CHECK_FEEDS of the pass's
    feeds come from the calibrating run (`known`), or else from a float run over the
    pass's feeds. The check (`checked`, round_and_correct's meta) scored the file before
    on those feeds. Unset, the equalized file is kept where it beats the other by
    FIT_MARGIN_DB (its ranges come from the calibration feeds); true: always. None
    where off or where the model has no such site."""
    if _swish_off(config):
        return None
    import onnx

    from compress.quant import swish_equalize
    qdq = onnx.load(str(target))
    sites = swish_equalize.find_sites(qdq)
    if not sites:
        return None
    names = [n for s in sites for n in (s.x, s.y)]
    taken = known is not None and known.outputs is not None and set(names) <= set(known.channels)
    chosen = ([feeds[i] for i in known.chosen] if taken
              else spread(feeds, config.bias_correction_samples))
    with ctx.progress.task(f"hard-swish equalization ({len(sites)} sites)", None):
        ranges, outputs = ((known.channels, known.outputs) if taken else
                           channel_ranges(onnx.load(str(source)), names, chosen))
        before = qdq.SerializeToString()
        meta = swish_equalize.equalize(qdq, ranges)
        after = qdq.SerializeToString()
        scores = ({} if config.equalize_hard_swish else
                  _before_and_after(before, after, chosen, outputs, checked))
    kept = config.equalize_hard_swish or scores["equalized"] > scores["as is"] + FIT_MARGIN_DB
    if kept:
        target.write_bytes(after)
    return {**meta, "kept": bool(kept), **({"calibration_sqnr_db": scores} if scores else {})}


def _before_and_after(before: bytes, after: bytes, feeds: list[dict], outputs: list,
                      checked: dict | None) -> dict:
    """The SQNR of the file before and after equalization on the check's feeds; the one
    before as the check scored it, where it did."""
    picks = spread(list(range(len(feeds))), CHECK_FEEDS)
    known = (checked or {}).get("calibration_sqnr_db", {}).get((checked or {}).get("kept"))
    candidates = {"equalized": after, **({"as is": before} if known is None else {})}
    scores = _scores(candidates, [feeds[i] for i in picks], [outputs[i] for i in picks])
    return {"as is": known, **scores} if known is not None else scores


def channel_ranges(float_model, names: list[str], feeds: list[dict]) -> tuple[dict, list]:
    """{tensor: (per-channel lowest, per-channel highest)} over `feeds`, and the float
    model's outputs on each feed, from one run."""
    from compress.quant.float_pass import add_channel_range
    from compress.quant.float_probe import tensor_values
    outputs = [o.name for o in float_model.graph.output]
    ranges, found = {}, []
    for values in tensor_values(float_model, names + outputs, feeds, os.cpu_count() or 1):
        found.append([values[name] for name in outputs])
        for name in names:
            add_channel_range(ranges, name, values[name])
    return ranges, found
