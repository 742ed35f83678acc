"""What a Ray worker runs for one trial: the variant's stages and baselines, into the
stage cache every run of the output folder shares (a path all nodes see at the same
place). Importable without Ray: the task is this module's function, sent by reference.
"""
from __future__ import annotations

import socket
import time
from pathlib import Path


def compress_variant(pipeline, stage_cache: str, force: bool, threads: int, targets) -> dict:
    """{artifacts: {id: sha256}, node, seconds}, or {message, stage_error, node} when the
    variant cannot be made (the driver records the trial as failed, with that message).
    `targets`: the search's, resolved once by its driver (runner.targets.Targets)."""
    from compress.errors import CompressError, StageError
    from compress.runner.run import TrialRun, run_pipeline
    node, started = socket.gethostname(), time.perf_counter()
    shared = Path(stage_cache)
    if not shared.parent.is_dir():
        return {"message": f"the stage cache's folder {shared.parent} is not on Ray node "
                f"{node}: the trials' stages travel through it, so every node needs it at "
                "the same path (a shared file system), or run the search with executor: "
                "local", "stage_error": False, "node": node}
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        pass   # a pipeline from ONNX needs no torch; its stages say so if they do
    try:
        trial = TrialRun(targets.for_variant(pipeline), shared, {}, compress_only=True)
        result = run_pipeline(pipeline, force=force, quiet=True, trial=trial)
    except CompressError as exc:
        return {"message": str(exc), "stage_error": isinstance(exc, StageError), "node": node}
    return {"artifacts": {a.id: a.sha256 for a in result.artifacts}, "node": node,
            "seconds": round(time.perf_counter() - started, 3)}
