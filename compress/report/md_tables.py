"""The model, artifact, benchmark and op-placement tables of report.md, and the
quantization details. Every text from a user or a library goes through md()."""
from __future__ import annotations

from compress.report.mdtext import fmt, md
from compress.model.table import format_count
from compress.report.gains import speedup_text


def artifact_table(report: dict) -> list[str]:
    lines = ["| artifact | format | precision | parent | size (MB) | parity with torch | sha256 |",
             "|---|---|---|---|---:|---|---|"]
    for a in report["artifacts"]:
        worst = a["meta"].get("parity", {}).get("worst")
        parity = (f"max abs {worst['max_abs_error']:.2g}, cosine {worst['cosine']:.6f}, "
                  f"top-1 {worst['top1_agreement']:.3f}" if worst and "cosine" in worst else "—")
        preset = (a["meta"].get("preset") or {}).get("name")
        precision = md(a["precision"]) + (f" (preset {md(preset)})" if preset else "")
        lines.append(f"| {md(a['id'])} | {md(a['format'])} | {precision} | "
                     f"{md(a['parent']) if a['parent'] else '—'} | "
                     f"{a['size_bytes'] / 2**20:.3f} | {parity} | {a['sha256'][:12]} |")
    return lines


def model_table(report: dict) -> list[str]:
    lines = ["| artifact | format | precision | parameters | MACs | weight sparsity | metric | size (MB) |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for m in report["models"]:
        metric = (f"{md(m['metric_name'])} {m['metric']:.4f} ({md(m['measured_with'])})"
                  if m["metric"] is not None else "—")
        sparsity = f"{m['sparsity']:.1%}" if m["sparsity"] is not None else "—"
        lines.append(f"| {md(m['artifact'])} | {md(m['format'])} | {md(m['precision'])} | "
                     f"{format_count(m['parameters'])} | {format_count(m['macs'])} | {sparsity} | "
                     f"{metric} | {m['size_bytes'] / 2**20:.3f} |")
    return lines


def benchmark_table(report: dict) -> list[str]:
    by_pair = {(g["artifact"], g["target"]): g for g in report["gains"]}
    lines = ["| target | artifact | engine | p50 ms | p90 ms | p99 ms | mean ± std ms | per s | "
             "peak MB (model) | load ms / first run ms | metric | drop vs the source | "
             "energy mJ | speed-up p50 | size ratio |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for b in report["benchmarks"]:
        lat, m = b["latency_ms"], b["metric"]
        g = by_pair.get((b["artifact"], b["target"]))
        name = md(b["artifact"]) + (" (baseline)" if b["baseline"] else "")
        metric = f"{md(m['name'])} {m['value']:.4f}" if m else "—"
        broken = ((m or {}).get("details") or {}).get("non_finite_values")
        metric += f" (**{broken} NaN/inf values**)" if broken else ""
        energy = fmt(b["energy_mj"]) if b["energy_mj"] is not None else "unmeasured"
        lines.append(
            f"| {md(b['target'])} | {name} | {md(b['engine'])} | {lat['p50']:.3f} | "
            f"{lat['p90']:.3f} | {lat['p99']:.3f} | {lat['mean']:.3f} ± {lat['std']:.3f} | "
            f"{fmt(b['throughput_per_s'], 1)} | "
            f"{b['peak_memory_mb']:.1f} ({b['model_memory_mb']:.1f}) | "
            f"{fmt(b.get('load_ms'), 1)} / {fmt(b.get('first_run_ms'), 3)} | {metric} | "
            f"{fmt(m['drop'], 4) if m else '—'} | {energy} | "
            f"{md(speedup_text(g)) if g else '—'} | "
            f"{fmt(g['size_ratio'], 3) if g else '—'} |")
    return lines + _baseline_note(report) + ["", *engine_baseline_table(report)]


def _baseline_note(report: dict) -> list[str]:
    """What the drops and speed-ups are measured against."""
    metric = next((b["metric"] for b in report["benchmarks"] if b["metric"]), None)
    lines = ["", "Speed-ups are against the baselines named beside them, the model as given "
             "measured on the same target in this run: first on onnxruntime (or, on a target "
             "without it, in the variant's format), then on the variant's own engine where that "
             "differs. Size ratios are against the baseline on the variant's engine. Load ms is "
             "how long the runner took to open the model, first run ms its first inference "
             "(medians over the rounds, each a fresh process)."]
    if metric:
        lines.append(f"Drops are against the source model as given: its {md(metric['name'])} is "
                     f"{metric['baseline']:.4f} on the same evaluation data.")
    return lines


def engine_baseline_table(report: dict) -> list[str]:
    """The baselines' runs on the targets' other engines, beside the target's own."""
    rows = report.get("engine_baselines") or []
    if not rows:
        return []
    lines = ["FP32 baselines on each engine of a target (the second speed-up above is against "
             "the one on the variant's engine; these runs are timed only, never judged):", "",
             "| target | baseline | engine | p50 ms | p90 ms |", "|---|---|---|---:|---:|"]
    for b in [*(x for x in report["benchmarks"] if x["baseline"]), *rows]:
        lat = b.get("latency_ms")
        said = "left out (it cannot open the model)" if b.get("left_out") else "unmeasured"
        times = (f"{lat['p50']:.3f} | {lat['p90']:.3f}" if lat else
                 f"{said}: {md(b.get('unmeasured'))} | —")
        lines.append(f"| {md(b['target'])} | {md(b['artifact'])} | {md(b['engine'])} | {times} |")
    return lines + [""]


def _placed_on(placed: dict) -> str:
    fallback = placed.get("fallback")
    int8 = placed.get("int8_nodes") or {}   # LiteRT: which kernels ran the int8 ops
    return "; ".join(f"{md(name)}: {part['nodes']} nodes"
                     + (f" ({int8[name]} in int8)" if int8.get(name) else "")
                     + f", {part['flops_share']:.1%} of FLOPs"
                     for name, part in placed["by_provider"].items()
                     if not fallback or name not in ("CPUExecutionProvider", "builtin"))


def placement_table(report: dict) -> list[str]:
    """Where each op ran, for the measurements on an accelerator (or XNNPACK)."""
    rows = [b for b in report["benchmarks"] if b.get("placement")]
    if not rows:
        return []
    lines = ["## Where each op ran", "",
             "| target | artifact | on the accelerator | fell back to the CPU |", "|---|---|---|---|"]
    for b in rows:
        placed, pair = b["placement"], f"| {md(b['target'])} | {md(b['artifact'])} |"
        if "error" in placed:
            lines.append(f"{pair} {md(placed['error'])} | — |")
            continue
        fallback = placed.get("fallback")
        back = ("—" if not fallback else
                f"{fallback['nodes']} nodes ({md(', '.join(sorted(fallback['op_types'])))}), "
                f"{fallback['flops_share']:.1%} of FLOPs" if fallback["nodes"] else "none")
        lines.append(f"{pair} {_placed_on(placed)} | {back} |")
    return lines + ["", "FLOPs are estimated from the tensor shapes (convolutions and "
                    "matrix products exactly, other ops one per output element).", ""]


def _accuracy_aware(name: str, search: dict) -> list[str]:
    verdict = "met" if search["budget_met"] else "NOT met (best model found kept)"
    kept = md(", ".join(search["kept_in_float"])) or "none"
    lines = [f"### {md(name)}: accuracy-aware, max_drop {search['max_drop']:g}", "",
             f"All layers quantized: drop {search['all_quantized_drop']:.6f}. Budget "
             f"{verdict}: final drop {search['final_drop']:.6f} with "
             f"{len(search['kept_in_float'])} layer(s) in float ({kept}); "
             f"{search['attempts']} quantized models tried.", ""]
    if search["sensitivity"]:
        lines += ["| layer | torch module (as exported; a conv folded with its BatchNorm "
                  "shows the BatchNorm) | metric with it in float | recovered |",
                  "|---|---|---:|---:|"]
        lines += [f"| {md(row['layer'])} | {md(row.get('module') or '—')} | "
                  f"{row['metric_without_it']:.6f} | {row['recovered']:+.6f} |"
                  for row in sorted(search["sensitivity"], key=lambda r: -r["recovered"])]
        lines.append("")
    return lines


def quantization_details(report: dict) -> list[str]:
    """Accuracy-aware searches (sensitivity table, layers kept in float) and INT4 weight
    precision, for the artifacts that have them."""
    lines = []
    for artifact in report["artifacts"]:
        meta, name = artifact.get("meta") or {}, artifact["id"]
        if meta.get("accuracy_aware"):
            lines += _accuracy_aware(name, meta["accuracy_aware"])
        tuned = meta.get("autotune")
        if tuned:
            verdict = "met" if tuned["budget_met"] else "NOT met (its best model kept)"
            trials = ", ".join(f"{value:.6f}" for value in tuned["trial_metrics"])
            lines += [f"### {md(name)}: neural-compressor autotune, max_drop "
                      f"{tuned['max_drop']:g}", "",
                      f"{tuned['trials']} configurations tried (metric: {trials}). Budget "
                      f"{verdict}: final drop {tuned['final_drop']:.6f}.", ""]
        weights = meta.get("weights")
        if weights:
            biggest = ", ".join(f"{md(t['name'])} ({format_count(t['parameters'])})"
                                for t in weights["largest_float_tensors"][:4]) or "none"
            lines += [f"### {md(name)}: weight precision", "",
                      f"{weights['effective_bits_per_weight']:.2f} bits per weight on average "
                      f"(scales included) over {format_count(weights['parameters'])} parameters; "
                      f"{weights['float_share']:.1%} stayed in float (largest: {biggest}).", ""]
        lines += _tflite_form_lines(name, meta) + _float_layer_lines(name, meta)
    return lines


def _float_layer_lines(name: str, meta: dict) -> list[str]:
    """The layers of an INT8 file that still compute in float, and their time."""
    layers = meta.get("float_layers") or []
    if meta.get("quantized_nothing"):
        return [f"### {md(name)}: nothing quantized", "",
                f"**{md(meta['quantized_nothing'])}.**", ""]
    if not layers:
        return []
    def share(layer: dict) -> str:
        return ("time not measured" if layer["time_share"] is None else
                f"{layer['time_share']:.0%} of the file's time")
    return [f"### {md(name)}: layers that stayed float", "",
            *(f"- {md(layer['op'])} `{md(layer['node'])}` ({share(layer)}): {md(layer['why'])}"
              for layer in layers),
            "", "Time shares: onnxruntime's session profile of this file, 1 thread, median "
            "of 10 runs on a calibration feed.", ""]


NORMALISED = {"signature_added": "a `serving_default` signature added (the file had none)",
              "op_codes_moved": "{} op codes read from the legacy `deprecated_builtin_code`",
              "fp16_weights_dequantized": "{} float16 weights made float32 first",
              "custom_ops_replaced": "custom ops made builtins: {}"}


def _tflite_form_lines(name: str, meta: dict) -> list[str]:
    """A TFLite file rewritten before ai-edge-quantizer, and ops left in float32."""
    done = [NORMALISED[key].format(md(", ".join(f"{k} x{v}" for k, v in value.items()))
                                   if isinstance(value, dict) else value)
            for key, value in (meta.get("normalised") or {}).items() if key in NORMALISED]
    left = meta.get("float_ops") or {}
    if not done and not left:
        return []
    words = [f"The source file was rewritten for the quantizer: {'; '.join(done)}."] if done else []
    if left:
        words.append("Mixed int8: these ops stayed float32 (ai-edge-quantizer has no int8 for "
                     f"them): {md(', '.join(f'{op} x{n}' for op, n in left.items()))}.")
    return [f"### {md(name)}: the TFLite file", "", " ".join(words), ""]


def output_judges(report: dict) -> dict | None:
    """{output: {metric, why}} of the first measurement judged with primary auto (every
    measurement judges alike), None where none was."""
    return next((b["metric"]["details"]["judges"] for b in report["benchmarks"]
                 if ((b.get("metric") or {}).get("details") or {}).get("judges")), None)


def judge_lines(report: dict) -> list[str]:
    """Which figure judged each output (fidelity with primary auto), and why: said once,
    from the first measurement that has them (every measurement judges alike)."""
    judges = output_judges(report)
    if not judges:
        return []
    names = {"top1_agreement": "top-1 agreement", "cosine": "cosine similarity"}
    lines = [f"- `{md(output)}`: {names.get(j['metric'], md(j['metric']))}, as {md(j['why'])}"
             for output, j in judges.items()]
    return ["Without labels each output is judged by the figure that fits it, the worst of "
            "them checked against the budgets (`data.metric.primary` names one instead):",
            "", *lines, ""]
