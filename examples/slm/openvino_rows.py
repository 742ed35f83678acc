"""OpenVINO GenAI's rows of `make slm-weight-only`: the pipeline's export.ovgenai as a user
of OpenVINO would set it (its converter's float IR; NNCF's INT8; NNCF's INT4 without
data; NNCF's INT4 with AWQ and scale estimation on calibration ids apart from the
evaluation text), scored on the same ids and timed in the same rounds as the other files."""
from __future__ import annotations

import time
from pathlib import Path

# (label, export.ovgenai settings)
NNCF_ROUTES = (("OpenVINO GenAI float (its converter's IR)", {}),
               ("NNCF INT8 (asymmetric, per channel)", {"weights": "int8"}),
               ("NNCF INT4 (asymmetric, groups of 64, no data)", {"weights": "int4"}),
               ("NNCF INT4 + AWQ + scale estimation (calibration ids)",
                {"weights": "int4", "awq": True, "scale_estimation": True}))


class Scorer:
    """Scores an OpenVINO GenAI folder against the float export's logits."""

    def __init__(self, threads: int = 2):
        self.threads = threads

    def score(self, folder: Path, reference):
        from runtimes.lm.ovgenai import OVGenaiModel
        return reference.score(OVGenaiModel(folder, self.threads).logits)


def openvino_rows(hf_folder: Path, out: Path, calibration: list[int], say):
    """The rows (label, folder, seconds, their scorer) and the versions; none and why
    where openvino-genai or NNCF is not installed."""
    try:
        import nncf
        import openvino_genai
    except ImportError as exc:
        say(f"OpenVINO GenAI rows left out: {exc} (pip install -e \".[llm]\")")
        return [], None
    from compress.stages.export_ovgenai import ExportOVGenai, build_folder
    rows = []
    for n, (label, settings) in enumerate(NNCF_ROUTES):
        folder = out / f"ovgenai-{n}"
        started = time.perf_counter()
        if not (folder / "openvino_model.xml").is_file():
            build_folder(hf_folder, folder, ExportOVGenai(**settings), calibration)
        seconds = time.perf_counter() - started if settings else None
        rows.append({"label": label, "folder": folder, "seconds": seconds, "route": Scorer()})
        say(f"{label}: made in {time.perf_counter() - started:.0f} s")
    return rows, f"openvino-genai {openvino_genai.__version__}, nncf {nncf.__version__}"
