"""What a run needs to be reproduced: versions, machine, seed, digests."""
from __future__ import annotations

import platform
import sys
import time
from importlib import metadata

from runtimes.hostinfo import describe_host

PACKAGES = ("edge-compress", "torch", "onnx", "onnxscript", "onnxruntime", "numpy",
            "pydantic", "torch-pruning", "neural-compressor", "ai-edge-litert", "litert-torch")


def package_versions() -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def build_manifest(pipeline, config_sha256: str, source_sha256: str, targets) -> dict:
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(sys.argv),
        "python": platform.python_version(),
        "packages": package_versions(),
        "host": describe_host(),
        "seed": pipeline.seed,
        "threads": {name: profile.runtime.threads for name, profile in targets},
        "config_sha256": config_sha256,
        "source_model_sha256": source_sha256,
    }
