"""A pipeline run's variants on one target, with what the hardware could give: each
measurement's GMAC/s (the model's multiply-adds over its p50) against this CPU's int8
and fp32 peaks, measured by peaks.py on a large GEMM with the same threads.

    python examples/engines/headline.py RUN_DIR [--target host-cpu] [--peaks PEAKS.json]

Without --peaks it measures them first (about 20 s). Every number comes from RUN_DIR's
report.json (the same run: latencies, both speed-ups, fidelity) or from the peaks run.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from runtimes import engines  # noqa: E402  (this checkout's)


def _peaks(path: Path | None, threads: int) -> dict:
    if path is not None:
        return json.loads(path.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "peaks.json"
        subprocess.run([sys.executable, str(HERE / "peaks.py"), "--threads", str(threads),
                        "--json", str(out)], check=True, stdout=sys.stderr)
        return json.loads(out.read_text())


def _fidelity(bench: dict) -> str:
    details = ((bench.get("metric") or {}).get("details")) or {}
    if "top1_agreement" not in details:
        return "— | —"
    return f"{details['top1_agreement']:.3f} | {details['sqnr_db']:.1f}"


def _row(bench: dict, gain: dict | None, macs: float, peaks: dict, precision: str,
         reference_p50: float) -> str:
    """A variant's speed-ups are the report's (gains); a baseline's only against the
    reference (FP32 on another engine against FP32 on onnxruntime)."""
    p50 = bench["latency_ms"]["p50"]
    gmac = macs / (p50 / 1e3) / 1e9
    ref = f"{(gain['speedup_p50'] if gain else reference_p50 / p50):.2f}x"
    same = f"{gain['same_engine']['speedup_p50']:.2f}x" if gain and gain["same_engine"] else "—"
    shares = " | ".join(f"{gmac / peaks['peak'][p]['gmac_s']:.0%}" for p in ("int8", "fp32"))
    name = bench["artifact"] + (" (FP32 baseline)" if bench["baseline"] else "")
    runs_in = bench["runtime"].get("precision")   # an engine's inference precision
    precision += f", runs {runs_in}" if runs_in and runs_in != "f32" else ""
    return (f"| {name} | {bench['engine']} | {precision} | "
            f"{p50:.3f} | {ref} | {same} | {_fidelity(bench)} | {gmac:.0f} | {shares} |")


def table(report: dict, target: str, peaks: dict) -> list[str]:
    macs = next((m["macs"] for m in report["models"] if m["macs"]), None)  # one network in all
    if macs is None:
        print("error: the report has no MAC count (it is counted on a torch source; this "
              "run's source is a model file)", file=sys.stderr)
        raise SystemExit(2)
    gains = {g["artifact"]: g for g in report["gains"] if g["target"] == target}
    rows = [b for b in report["benchmarks"] + report.get("engine_baselines", [])
            if b["target"] == target and "latency_ms" in b]
    # the target's own baselines first (onnxruntime's first), then the rest by speed
    rows.sort(key=lambda b: (not b["baseline"], bool(b.get("comparison")),
                             b["engine"] != engines.reference(), b["latency_ms"]["p50"]))
    lines = [f"{target}: {rows[0]['measured_on']['cpu']}, {rows[0]['runtime'].get('threads')} "
             f"threads; {macs / 1e9:.3g} GMAC per inference; peaks (peaks.py, M=N=K="
             f"{peaks['size']}): int8 {peaks['peak']['int8']['gmac_s']:.0f} GMAC/s "
             f"({peaks['peak']['int8']['engine']}), fp32 {peaks['peak']['fp32']['gmac_s']:.0f} "
             f"GMAC/s ({peaks['peak']['fp32']['engine']})", "",
             "| variant | engine | precision | p50 ms | vs onnxruntime FP32 | vs FP32 on its "
             "engine | top-1 agreement | SQNR dB | GMAC/s | of int8 peak | of fp32 peak |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    precision = {a["id"]: a["precision"] for a in report["artifacts"]}
    reference = rows[0]["latency_ms"]["p50"]   # the target's own baseline record
    return lines + [_row(b, gains.get(b["artifact"]) if not b["baseline"] else None, macs,
                         peaks, precision[b["artifact"]], reference) for b in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--target", default="host-cpu")
    parser.add_argument("--peaks", type=Path, help="a peaks.py --json record (else measured)")
    args = parser.parse_args()
    report = json.loads((args.run_dir / "report.json").read_text())
    threads = next(b["runtime"].get("threads") for b in report["benchmarks"]
                   if b["target"] == args.target)
    print("\n".join(table(report, args.target, _peaks(args.peaks, threads or 2))))


if __name__ == "__main__":
    main()
