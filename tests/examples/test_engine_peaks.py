"""examples/engines/peaks.py and headline.py on a small GEMM and a real pipeline report:
every engine's output checked before it is timed, the peaks named, and the headline
table's GMAC/s computed from the report's MACs and p50s."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST_INT8, pipeline_dict, write_pipeline

pytest.importorskip("openvino")
ENGINES = Path(__file__).resolve().parents[2] / "examples" / "engines"


def _exact_u8s8() -> bool:
    """OpenVINO's u8 x s8 GEMM is exact on VNNI and Arm; on x86-64 without VNNI its
    VPMADDUBSW saturates int16 pairs, and the row must then say so rather than be timed
    (onnxruntime's rows are exact everywhere: the session asks for it)."""
    from runtimes.hostinfo import describe_host
    host = describe_host()
    return not host["arch"].startswith("x86") or bool(
        {"avx512_vnni", "avx_vnni", "amx_int8"} & set(host["cpu_flags"] or ()))


def test_every_gemm_is_right_before_it_is_timed_and_the_peaks_are_named(tmp_path):
    out = tmp_path / "peaks.json"
    done = subprocess.run([sys.executable, str(ENGINES / "peaks.py"), "--size", "96",
                           "--seconds", "0.02", "--threads", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    for row in record["rows"]:
        assert ("error" in row) == ("gmac_s" not in row), row   # a wrong output is not timed
        if row["engine"] != "openvino" or row["precision"] != "int8" or _exact_u8s8():
            assert "error" not in row and row["gmac_s"] > 0, row
    assert {row["engine"] for row in record["rows"]} >= {"onnxruntime", "openvino"}
    for precision in ("fp32", "int8"):
        best = max(r.get("gmac_s", 0) for r in record["rows"] if r["precision"] == precision)
        assert record["peak"][precision]["gmac_s"] == best
    assert "| MatMulInteger |" in done.stdout   # the kernel that ran, read back


@pytest.mark.runs  # a whole pipeline, then the example script over its report
def test_the_headline_quotes_each_measurement_against_the_peaks(tmp_path, project):
    import compress
    stages = [{"type": "export.onnx"}, {"type": "quantize", "scheme": "int8-static", **FAST_INT8},
              {"type": "benchmark", "warmup": 1, "runs": 5, "rounds": 1}]
    result = compress.run(write_pipeline(project, pipeline_dict(stages=stages)), quiet=True)
    peaks = {"size": 8, "peak": {"int8": {"gmac_s": 100.0, "engine": "x"},
                                 "fp32": {"gmac_s": 50.0, "engine": "y"}}}
    (tmp_path / "peaks.json").write_text(json.dumps(peaks))
    done = subprocess.run([sys.executable, str(ENGINES / "headline.py"), str(result.run_dir),
                           "--peaks", str(tmp_path / "peaks.json")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [line.split(" | ") for line in done.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| variant |")]
    macs = result.report["models"][0]["macs"]
    for bench in result.benchmarks:
        row = next(r for r in rows if r[0] == f"| {bench['artifact']}" + (
            " (FP32 baseline)" if bench["baseline"] else "") and r[1] == bench["engine"])
        gmac = macs / (bench["latency_ms"]["p50"] / 1e3) / 1e9
        assert float(row[-3]) == pytest.approx(gmac, abs=0.5)
        assert row[-2] == f"{gmac / 100:.0%}"
