"""What a run needs to be reproduced: versions, machine, seed, digests."""
from __future__ import annotations

import platform
import sys
import time
from importlib import metadata

from runtimes.hostinfo import describe_host

PACKAGES = ("edge-compress", "torch", "onnx", "onnxscript", "onnxruntime", "numpy",
            "pydantic", "torch-pruning", "neural-compressor", "ai-edge-litert", "litert-torch")


def product_version() -> str:
    """This package's version as installed; from a source tree never installed, the one
    pyproject.toml gives (`compress --version`)."""
    try:
        return metadata.version("edge-compress")
    except metadata.PackageNotFoundError:
        import re
        from pathlib import Path
        try:
            text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
        except OSError:
            text = ""
        found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
        return found.group(1) if found else "(version unknown)"


def package_versions() -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def measured_threads(benchmarks, targets) -> dict:
    """{target: the threads its measurements ran with}: one number, a sorted list where
    they differ, None where nothing was measured. What ran, not what the profile asked:
    the runner caps a profile's threads at the measuring machine's cores."""
    used = {name: sorted({b["runtime"].get("threads") for b in benchmarks
                          if b["target"] == name and b.get("runtime")} - {None})
            for name, _ in targets}
    return {name: (found[0] if len(found) == 1 else found or None)
            for name, found in used.items()}


def build_manifest(pipeline, config_sha256: str, source_sha256: str, targets,
                   benchmarks=()) -> dict:
    """`benchmarks`: every measurement of the run (comparisons too), for the threads."""
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(sys.argv),
        "python": platform.python_version(),
        "packages": package_versions(),
        "host": describe_host(),
        "seed": pipeline.seed,
        "threads": measured_threads(benchmarks, targets),
        "config_sha256": config_sha256,
        "source_model_sha256": source_sha256,
    }
