"""Peak memory of `compress run` on a ~1 GB model, per quantization scheme.

    .venv/bin/python examples/large_model/memory.py [--label after] [--schemes ...]
        [--pythonpath OTHER_CHECKOUT] [--folder build/large_model] [--no-docs]

Builds the model (examples/large_model/model.py: 15 Linear layers of 4096 x 4096 float32,
weights in an external data file) and 16 calibration / 16 evaluation feeds, writes one
pipeline per scheme next to them (quantize, then a tiny benchmark on the host-cpu
target: 1 warm-up and 3 timed runs, plus the metric on the evaluation feeds), and runs
each `compress run` alone, under /usr/bin/time -v, in examples/large_model/peak.py.

Reported, as multiples of the model's size on disk:
- pipeline peak: the `compress run` process's own high-water mark (VmHWM);
- /usr/bin/time: its "Maximum resident set size", the largest of the process and the
  runner subprocesses it waited for (a child started with vfork inherits the parent's
  mark, so this is never below the pipeline's own);
- runner peak: the benchmark's runner subprocess, as it measures itself (report.json);
- the largest step: the pipeline step whose sampled RSS peaked highest.
Results go to <folder>/results-<label>.json; docs/memory.md is written from every
results file in the folder. `--pythonpath` runs another checkout's compress (e.g. the
commit before this change, for the "before" numbers).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import model as large  # noqa: E402 - examples/large_model/model.py
from memory_doc import table, write_docs  # noqa: E402 - examples/large_model/memory_doc.py

SCHEMES = ("int8-dynamic", "int8-static", "int4-weight-only")
PIPELINE = """\
# written by examples/large_model/memory.py: {scheme} alone on the ~1 GB model
name: {scheme}
model:
  onnx: linear_stack.onnx
data:
  calibration: calibration.npz
  evaluation: evaluation.npz
  metric: {{type: fidelity, primary: cosine}}
stages:
  - {{type: quantize, name: {scheme}, scheme: {scheme}}}
  - {{type: benchmark, warmup: 1, runs: 3, rounds: 1}}
targets:
  - {{profile: host-cpu, gate: false}}
output: runs
"""


def prepare(folder: Path) -> Path:
    """The model, data and pipelines in `folder` (the model is built once)."""
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "linear_stack.onnx"
    if not (model.is_file() and model.with_name(model.name + ".data").is_file()):
        large.build(model)
    large.write_data(folder)
    for scheme in SCHEMES:
        (folder / f"{scheme}.yaml").write_text(PIPELINE.format(scheme=scheme))
    return model


def model_bytes(model: Path) -> int:
    return model.stat().st_size + model.with_name(model.name + ".data").stat().st_size


def _time_peak(stderr: str) -> int:
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    return int(found[1]) * 1024 if found else 0


def _report(folder: Path, scheme: str) -> dict:
    """Size, cosine and runner peak of the quantized artifact, from the run's report."""
    report = json.loads((folder / "runs" / scheme / "report.json").read_text())
    bench = {b["artifact"]: b for b in report["benchmarks"]}
    artifact = next(a for a in report["artifacts"] if a["id"] == scheme)
    metric = bench[scheme]["metric"]
    source = next(a for a in report["artifacts"] if a["id"] == "00-source")
    return {"size_bytes": artifact["size_bytes"], "cosine": metric["value"],
            "source_sha256": source["sha256"],
            "sqnr_db": metric["details"]["sqnr_db"],
            "runner_peak_mb": bench[scheme]["peak_memory_mb"],
            "runner_peak_fp32_mb": bench["00-source"]["peak_memory_mb"],
            "stage_seconds": artifact["meta"].get("seconds"),
            "tensor_by_tensor": "tensor_by_tensor" in artifact["meta"]}


def _outputs(model: Path, folder: Path) -> list:
    import numpy as np
    import onnxruntime as ort
    rows = np.load(folder / "evaluation.npz")["h0"]
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return [session.run(None, {"h0": rows[i:i + large.TOKENS]})[0]
            for i in range(0, len(rows), large.TOKENS)]


def compare(folder: Path, label: str, scheme: str) -> float | None:
    """Keep the quantized model as <label>-<scheme>.onnx; the largest difference of its
    outputs on the evaluation feeds from the "before" run's model, where there is one."""
    import shutil
    made = folder / "runs" / scheme / f"01-{scheme}" / "model.onnx"
    kept = folder / f"{label}-{scheme}.onnx"
    shutil.copyfile(made, kept)
    before = folder / f"before-{scheme}.onnx"
    if label == "before" or not before.is_file():
        return None
    return max(float(abs(a - b).max()) for a, b in zip(_outputs(kept, folder),
                                                       _outputs(before, folder)))


def run_scheme(folder: Path, scheme: str, pythonpath: str | None) -> dict:
    out = folder / f"peak-{scheme}.json"
    command = ["/usr/bin/time", "-v", sys.executable, str(HERE / "peak.py"), str(out), "run",
               f"{scheme}.yaml", "--force", "--quiet", "--steps"]
    env = dict(os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {}))
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: a budget missed, which is not this script's concern
        raise SystemExit(f"{scheme}: compress run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    peak = json.loads(out.read_text())
    steps = {}
    for step in peak["steps"]:  # a step run more than once: its highest peak
        steps[step["step"]] = max(steps.get(step["step"], 0), step["peak_rss"])
    return {"scheme": scheme, "peak_rss_bytes": peak["peak_rss_bytes"],
            "time_max_rss_bytes": _time_peak(done.stderr), "compress_from": peak["compress"],
            "steps": steps, **_report(folder, scheme)}


def machine() -> dict:
    import onnx
    import onnxruntime
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    memory = next(int(line.split()[1]) * 1024 for line in
                  Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(memory / 2**30, 1),
            "os": platform.platform(), "python": platform.python_version(),
            "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=str(ROOT / "build" / "large_model"))
    parser.add_argument("--label", default="after")
    parser.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=SCHEMES)
    parser.add_argument("--pythonpath", help="run the compress package found here")
    parser.add_argument("--no-docs", action="store_true", help="leave docs/memory.md alone")
    parser.add_argument("--docs-only", action="store_true",
                        help="write docs/memory.md from the results files, run nothing")
    parser.add_argument("--note", default="", help="said under the results in docs/memory.md "
                        "(e.g. which commit --pythonpath holds)")
    args = parser.parse_args(argv)
    folder = Path(args.folder).resolve()
    if args.docs_only:
        return write_docs(folder, ROOT / "docs" / "memory.md")
    model = prepare(folder)
    results = {"label": args.label, "note": args.note,
               "command": shlex.join([".venv/bin/python", *sys.argv]),
               "machine": machine(), "model_bytes": model_bytes(model),
               "parameters": large.parameters(), "runs": []}
    for scheme in args.schemes:
        results["runs"].append(run_scheme(folder, scheme, args.pythonpath))
        results["runs"][-1]["max_diff_vs_before"] = compare(folder, args.label, scheme)
        print(table(results)[-1], flush=True)
    (folder / f"results-{args.label}.json").write_text(json.dumps(results, indent=2))
    print("\n".join(table(results)))
    if not args.no_docs:
        write_docs(folder, ROOT / "docs" / "memory.md")


if __name__ == "__main__":
    main()
