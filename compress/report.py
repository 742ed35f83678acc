"""report.json (for machines and CI gates) and report.md (for people)."""
from __future__ import annotations

from pathlib import Path

from compress.artifacts import write_json_atomic
from compress.model_table import format_count
from compress.report_gains import engine_baseline_table, gains, speedup_text

_BUDGET_UNITS = {"latency_p90_ms": "ms", "peak_memory_mb": "MB", "model_size_mb": "MB",
                 "energy_mj": "mJ", "accuracy_drop": ""}


def _fits(verdicts, benchmarks: list[dict]) -> list[dict]:
    rows = []
    for bench in benchmarks:
        mine = [v for v in verdicts if v.artifact == bench["artifact"] and v.target == bench["target"]]
        statuses = {v.status for v in mine}
        failed = [v.metric for v in mine if v.status == "fail"]
        if failed:
            answer = "no: over budget on " + ", ".join(failed)
        elif "off-target" in statuses:
            answer = "unknown: measured off the device (" + next(
                v.reason for v in mine if v.status == "off-target") + ")"
        elif "unmeasured" in statuses:
            answer = "yes, except unmeasured: " + ", ".join(
                v.metric for v in mine if v.status == "unmeasured")
        else:
            answer = "yes" if mine else "no budget"
        rows.append({"artifact": bench["artifact"], "target": bench["target"],
                     "baseline": bench["baseline"], "fits": answer})
    return rows


def build_report(pipeline, manifest: dict, artifacts, benchmarks, verdicts, models, *,
                 gated: set, passed: bool, strict: bool, skipped: list[dict] = (),
                 cleanup_warnings: list[str] = (), engine_baselines: list[dict] = ()) -> dict:
    """`skipped`: artifact x target pairs not measured, with the reason;
    `engine_baselines`: the baselines' runs on the targets' other engines."""
    fits = _fits(verdicts, benchmarks) + [
        {"artifact": s["artifact"], "target": s["target"], "baseline": s.get("baseline", False),
         "fits": ("unknown, unmeasured: " if s.get("unmeasured") else "not measured: ")
         + s["reason"]} for s in skipped]
    return {
        "pipeline": {"name": pipeline.name, "config_sha256": manifest["config_sha256"]},
        "manifest": manifest,
        "artifacts": [a.to_dict() for a in artifacts],
        "models": models,
        "benchmarks": benchmarks,
        "engine_baselines": list(engine_baselines),
        "gains": gains(benchmarks, engine_baselines),
        "verdicts": [v.to_dict() for v in verdicts],
        "fits": fits,
        "gated_targets": sorted(gated),
        "strict": strict,
        "passed": passed,
        "cleanup_warnings": list(cleanup_warnings),
    }


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _artifact_table(report: dict) -> list[str]:
    lines = ["| artifact | format | precision | parent | size (MB) | parity with torch | sha256 |",
             "|---|---|---|---|---:|---|---|"]
    for a in report["artifacts"]:
        worst = a["meta"].get("parity", {}).get("worst")
        parity = (f"max abs {worst['max_abs_error']:.2g}, cosine {worst['cosine']:.6f}, "
                  f"top-1 {worst['top1_agreement']:.3f}" if worst and "cosine" in worst else "—")
        preset = (a["meta"].get("preset") or {}).get("name")
        precision = a["precision"] + (f" (preset {preset})" if preset else "")
        lines.append(f"| {a['id']} | {a['format']} | {precision} | {a['parent'] or '—'} | "
                     f"{a['size_bytes'] / 2**20:.3f} | {parity} | {a['sha256'][:12]} |")
    return lines


def _model_table(report: dict) -> list[str]:
    lines = ["| artifact | format | precision | parameters | MACs | weight sparsity | metric | size (MB) |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for m in report["models"]:
        metric = (f"{m['metric_name']} {m['metric']:.4f} ({m['measured_with']})"
                  if m["metric"] is not None else "—")
        sparsity = f"{m['sparsity']:.1%}" if m["sparsity"] is not None else "—"
        lines.append(f"| {m['artifact']} | {m['format']} | {m['precision']} | "
                     f"{format_count(m['parameters'])} | {format_count(m['macs'])} | {sparsity} | "
                     f"{metric} | {m['size_bytes'] / 2**20:.3f} |")
    return lines


def _benchmark_table(report: dict) -> list[str]:
    by_pair = {(g["artifact"], g["target"]): g for g in report["gains"]}
    lines = ["| target | artifact | engine | p50 ms | p90 ms | p99 ms | mean ± std ms | per s | "
             "peak MB (model) | metric | drop vs the source | energy mJ | speed-up p50 | size ratio |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for b in report["benchmarks"]:
        lat, m = b["latency_ms"], b["metric"]
        g = by_pair.get((b["artifact"], b["target"]))
        name = b["artifact"] + (" (baseline)" if b["baseline"] else "")
        metric = f"{m['name']} {m['value']:.4f}" if m else "—"
        broken = ((m or {}).get("details") or {}).get("non_finite_values")
        metric += f" (**{broken} NaN/inf values**)" if broken else ""
        energy = _fmt(b["energy_mj"]) if b["energy_mj"] is not None else "unmeasured"
        lines.append(
            f"| {b['target']} | {name} | {b['engine']} | {lat['p50']:.3f} | {lat['p90']:.3f} | {lat['p99']:.3f} | "
            f"{lat['mean']:.3f} ± {lat['std']:.3f} | {_fmt(b['throughput_per_s'], 1)} | "
            f"{b['peak_memory_mb']:.1f} ({b['model_memory_mb']:.1f}) | {metric} | "
            f"{_fmt(m['drop'], 4) if m else '—'} | {energy} | "
            f"{speedup_text(g)} | "
            f"{_fmt(g['size_ratio'], 3) if g else '—'} |")
    return lines + _baseline_note(report) + ["", *engine_baseline_table(report)]


def _baseline_note(report: dict) -> list[str]:
    """What the drops and speed-ups are measured against."""
    metric = next((b["metric"] for b in report["benchmarks"] if b["metric"]), None)
    lines = ["", "Speed-ups are against the baselines named beside them, the model as given "
             "measured on the same target in this run: first on onnxruntime (or, on a target "
             "without it, in the variant's format), then on the variant's own engine where that "
             "differs. Size ratios are against the baseline on the variant's engine."]
    if metric:
        lines.append(f"Drops are against the source model as given: its {metric['name']} is "
                     f"{metric['baseline']:.4f} on the same evaluation data.")
    return lines


def _hottest(snapshot: dict) -> float | None:
    temps = [zone["temp_c"] for zone in (snapshot.get("thermal") or {}).values()
             if zone.get("temp_c") is not None]
    return max(temps) if temps else None


def _conditions_summary(conditions: dict | None) -> str:
    """'governor schedutil, hottest zone 47.5 -> 49.0 °C, nvpmodel MAXN, jetson_clocks on'."""
    if not conditions:
        return ""
    before, after = conditions.get("before") or {}, conditions.get("after") or {}
    parts = []
    if before.get("governors"):
        parts.append(f"governor {'/'.join(before['governors'])}")
    start, end = _hottest(before), _hottest(after)
    if start is not None and end is not None:
        parts.append(f"hottest zone {start:.1f} -> {end:.1f} °C")
    if before.get("nvpmodel"):
        parts.append(f"nvpmodel {before['nvpmodel']['mode']}")
    if before.get("jetson_clocks"):
        parts.append(f"jetson_clocks {'on' if before['jetson_clocks']['on'] else 'off'} "
                     "(inferred)")
    if conditions.get("cpu_affinity"):
        parts.append(f"on CPUs {conditions['cpu_affinity']}")
    return f"; {', '.join(parts)}" if parts else ""


def _where_measured(report: dict) -> list[str]:
    """One line per target: which machine measured it, how (SSH costs), power meter and
    conditions worth a warning."""
    lines, seen = [], set()
    for b in report["benchmarks"]:
        if b["target"] in seen:
            continue
        seen.add(b["target"])
        on = b["measured_on"]
        machine = (f"{on.get('device_model') or on['cpu']} ({on['arch']}, {on['cores']} cores, "
                   f"host {on['hostname']})")
        remote = b.get("remote")
        how = (f"over SSH ({remote['host']}): connect {remote['connect_s']:.2f} s, copy "
               f"{remote['copied_bytes'] / 2**20:.2f} MiB in {remote['copy_s']:.2f} s, runner "
               f"round trip {remote['run_s_median']:.2f} s median over {remote['runs']} runs, "
               f"clean-up {remote['cleanup_s']:.2f} s" if remote else "on this machine")
        power = b.get("power")
        rate = (f", {power['sample_rate_hz']:.1f} samples/s" if power and
                power.get("sample_rate_hz") else "")
        meter = (f"power meter {power['meter']} ({power['detail']}{rate})" if power else
                 f"energy unmeasured: {b.get('energy_note') or 'no power meter'}")
        emulated = (f" **Emulated ({b['emulated']}): timings are not the device's and are "
                    "never checked against its budget.**" if b.get("emulated") else "")
        lines.append(f"- **{b['target']}**: {machine}, {how}; {meter}"
                     f"{_conditions_summary(b.get('conditions'))}.{emulated}")
        warnings = sorted({w for x in report["benchmarks"] if x["target"] == b["target"]
                           for w in ((x.get("conditions") or {}).get("warnings") or [])})
        lines += [f"  - warning: {w}" for w in warnings]
    lines += [f"- warning: {w}" for w in report.get("cleanup_warnings", [])]
    return lines


def _placement_table(report: dict) -> list[str]:
    """Where each op ran, for the measurements on an accelerator (or XNNPACK)."""
    rows = [b for b in report["benchmarks"] if b.get("placement")]
    if not rows:
        return []
    lines = ["## Where each op ran", "",
             "| target | artifact | on the accelerator | fell back to the CPU |", "|---|---|---|---|"]
    for b in rows:
        placed = b["placement"]
        if "error" in placed:
            lines.append(f"| {b['target']} | {b['artifact']} | {placed['error']} | — |")
            continue
        fallback = placed.get("fallback")
        int8 = placed.get("int8_nodes") or {}   # LiteRT: which kernels ran the int8 ops
        on = "; ".join(f"{name}: {part['nodes']} nodes"
                       + (f" ({int8[name]} in int8)" if int8.get(name) else "")
                       + f", {part['flops_share']:.1%} of FLOPs"
                       for name, part in placed["by_provider"].items()
                       if not fallback or name not in ("CPUExecutionProvider", "builtin"))
        back = ("—" if not fallback else
                f"{fallback['nodes']} nodes ({', '.join(sorted(fallback['op_types']))}), "
                f"{fallback['flops_share']:.1%} of FLOPs" if fallback["nodes"] else "none")
        lines.append(f"| {b['target']} | {b['artifact']} | {on} | {back} |")
    return lines + ["", "FLOPs are estimated from the tensor shapes (convolutions and "
                    "matrix products exactly, other ops one per output element).", ""]


def _verdict_table(report: dict) -> list[str]:
    lines = ["| target | artifact | budget | limit | value | verdict |", "|---|---|---|---:|---:|---|"]
    for v in report["verdicts"]:
        unit = _BUDGET_UNITS.get(v["metric"], "")
        status = v["status"] + (f" ({v['reason']})" if v["reason"] else "")
        lines.append(f"| {v['target']} | {v['artifact']} | {v['metric']} | {v['budget']:g} {unit} | "
                     f"{_fmt(v['value'], 4)} | {status} |")
    return lines


def _quantization_details(report: dict) -> list[str]:
    """Accuracy-aware searches (sensitivity table, layers kept in float) and INT4 weight
    precision, for the artifacts that have them."""
    lines = []
    for artifact in report["artifacts"]:
        meta, name = artifact.get("meta") or {}, artifact["id"]
        search = meta.get("accuracy_aware")
        if search:
            verdict = "met" if search["budget_met"] else "NOT met (best model found kept)"
            kept = ", ".join(search["kept_in_float"]) or "none"
            lines += [f"### {name}: accuracy-aware, max_drop {search['max_drop']:g}", "",
                      f"All layers quantized: drop {search['all_quantized_drop']:.6f}. Budget "
                      f"{verdict}: final drop {search['final_drop']:.6f} with {len(search['kept_in_float'])} "
                      f"layer(s) in float ({kept}); {search['attempts']} quantized models tried.", ""]
            if search["sensitivity"]:
                lines += ["| layer | torch module (as exported; a conv folded with its BatchNorm "
                          "shows the BatchNorm) | metric with it in float | recovered |",
                          "|---|---|---:|---:|"]
                lines += [f"| {row['layer']} | {row.get('module') or '—'} | "
                          f"{row['metric_without_it']:.6f} | {row['recovered']:+.6f} |"
                          for row in sorted(search["sensitivity"], key=lambda r: -r["recovered"])]
                lines.append("")
        tuned = meta.get("autotune")
        if tuned:
            verdict = "met" if tuned["budget_met"] else "NOT met (its best model kept)"
            trials = ", ".join(f"{value:.6f}" for value in tuned["trial_metrics"])
            lines += [f"### {name}: neural-compressor autotune, max_drop {tuned['max_drop']:g}", "",
                      f"{tuned['trials']} configurations tried (metric: {trials}). Budget "
                      f"{verdict}: final drop {tuned['final_drop']:.6f}.", ""]
        weights = meta.get("weights")
        if weights:
            biggest = ", ".join(f"{t['name']} ({format_count(t['parameters'])})"
                                for t in weights["largest_float_tensors"][:4]) or "none"
            lines += [f"### {name}: weight precision", "",
                      f"{weights['effective_bits_per_weight']:.2f} bits per weight on average "
                      f"(scales included) over {format_count(weights['parameters'])} parameters; "
                      f"{weights['float_share']:.1%} stayed in float (largest: {biggest}).", ""]
    return lines


def render_markdown(report: dict) -> str:
    m = report["manifest"]
    details = _quantization_details(report)
    details = ["## Quantization details", "", *details] if details else []
    verdict = "PASSED" if report["passed"] else "FAILED"
    lines = [f"# {report['pipeline']['name']}: {verdict}", "",
             f"Gated targets: {', '.join(report['gated_targets']) or 'none'}"
             f"{' (strict: unmeasured and off-target count as failures)' if report['strict'] else ''}."
             " The baseline (the model as given, exported in each engine's format) is measured for "
             "comparison and is not gated.", "",
             "## Which variant fits which device", "",
             "| target | artifact | fits |", "|---|---|---|"]
    lines += [f"| {f['target']} | {f['artifact']}{' (baseline)' if f['baseline'] else ''} | {f['fits']} |"
              for f in report["fits"]]
    host = m["host"]
    lines += ["", "## What each stage did to the model", "", *_model_table(report), "",
              "## Artifacts", "", *_artifact_table(report), "",
              *details,
              "## Where each target was measured", "", *_where_measured(report), "",
              "## Benchmarks (batch as declared)", "",
              *_benchmark_table(report), "",
              "peak MB is the benchmark process's peak resident memory; (model) is that minus "
              "the interpreter and runtime library before the model was loaded.", "",
              *_placement_table(report),
              "## Verdicts", "", *_verdict_table(report), "",
              "## Manifest", "",
              f"- packages: {', '.join(f'{k} {v}' for k, v in m['packages'].items() if v)}",
              f"- host: {host['hostname']}, {host['arch']}, {host['cpu']}, {host['cores']} cores, "
              f"flags {' '.join(host['cpu_flags']) or '—'}",
              f"- threads per target: {m['threads']}; seed {m['seed']}",
              f"- config sha256 {m['config_sha256']}; source model sha256 {m['source_model_sha256']}", ""]
    return "\n".join(lines)


def write_reports(run_dir: Path, report: dict) -> None:
    write_json_atomic(run_dir / "report.json", report)
    write_json_atomic(run_dir / "manifest.json", report["manifest"])
    tmp = run_dir / ".report.md.tmp"
    tmp.write_text(render_markdown(report))
    tmp.replace(run_dir / "report.md")
