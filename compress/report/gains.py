"""Speed-ups, and who each one is against.

Every variant measured on a target gets two speed-ups, both from FP32 baselines measured
on the same target in the same run:
- against the reference: the model as given on onnxruntime (runtimes.engines.reference),
  what a user runs without this pipeline; a target without it (a TFLite-only board) is
  compared with its own baseline in the variant's format;
- against the same engine: the FP32 baseline on the engine that ran the variant, in its
  format where there is one (TFLite int8 against TFLite FP32 on LiteRT, an OpenVINO INT8
  file against the FP32 ONNX on OpenVINO), so an engine's own speed is not credited to
  the compression.
Size and memory ratios are against the same-engine baseline (like with like).

The baseline runs on engines other than the target's own for their format are in
report["engine_baselines"] (timed only, never judged).
"""
from __future__ import annotations

from runtimes import engines


def _first(rows: list[dict], **wanted) -> dict | None:
    return next((r for r in rows if all(r[key] == value for key, value in wanted.items())),
                None)


def _ratios(bench: dict, base: dict | None) -> dict | None:
    if base is None:
        return None
    return {"baseline": base["artifact"], "engine": base["engine"],
            "speedup_p50": base["latency_ms"]["p50"] / bench["latency_ms"]["p50"]}


def gains(benchmarks: list[dict], engine_baselines: list[dict] = ()) -> list[dict]:
    """One row per variant (not baseline) and target: its speed-ups and ratios."""
    measured = [b for b in [*benchmarks, *engine_baselines] if "latency_ms" in b]
    rows = []
    for bench in benchmarks:
        here = [b for b in measured if b["baseline"] and b["target"] == bench["target"]]
        if bench["baseline"] or not here:
            continue
        own = [b for b in here if not b.get("comparison")]  # the target's own baselines
        # own can be empty: the target's own baseline unmeasured, a comparison measured
        reference = (_first(here, engine=engines.reference())
                     or _first(own, format=bench["format"]) or (own or here)[0])
        same = (_first(here, engine=bench["engine"], format=bench["format"])
                or _first(here, engine=bench["engine"]))
        like = same or reference
        rows.append({
            "artifact": bench["artifact"], "target": bench["target"], "engine": bench["engine"],
            **_ratios(bench, reference),
            "same_engine": _ratios(bench, same),
            "size_ratio": bench["size_bytes"] / like["size_bytes"],
            "peak_memory_ratio": bench["peak_memory_mb"] / like["peak_memory_mb"],
        })
    return rows


def speedup_text(gain: dict | None, digits: int = 2) -> str:
    """'2.16x vs 01-export.onnx on onnxruntime; 1.41x vs FP32 on openvino'."""
    if gain is None:
        return "—"
    text = f"{gain['speedup_p50']:.{digits}f}x vs {gain['baseline']} on {gain['engine']}"
    same = gain["same_engine"]
    if same and (same["baseline"], same["engine"]) != (gain["baseline"], gain["engine"]):
        text += f"; {same['speedup_p50']:.{digits}f}x vs {same['baseline']} on {same['engine']}"
    return text

