"""What the benchmark hands the device runner: the feed it times, the evaluation feeds
with labels or the original model's outputs, and, for a custom metric, where the runner
writes every evaluation output for this side to score."""
from __future__ import annotations

import tempfile
from pathlib import Path

from compress.errors import RemoteError


def write_inputs(ctx, folder: Path) -> tuple[Path | None, Path | None, dict | None]:
    """batch.npz (the one feed that is timed), eval.npz (feeds + labels/reference) and
    the metric: {name, baseline, primary, pairs, custom}."""
    from runtimes.feeds import write_feeds

    data = ctx.dataset("evaluation") or ctx.dataset("calibration")
    if data is None:
        return None, None, None
    names = [d.name for d in ctx.inputs]
    write_feeds(str(folder / "batch.npz"), data.take(1), names)
    evaluation = ctx.dataset("evaluation")
    if evaluation is None:
        return folder / "batch.npz", None, None
    metric = ctx.metric()
    write_feeds(str(folder / "eval.npz"), evaluation.feeds, names,
                labels=list(evaluation.labels) if metric.type == "accuracy" else None,
                # the source's outputs for every metric: fidelity is reported beside it
                references=ctx.reference_outputs())
    fidelity = metric.type == "fidelity"
    return folder / "batch.npz", folder / "eval.npz", {
        "name": metric.type, "baseline": ctx.metric_baseline(), "custom": metric.type == "custom",
        "primary": metric.primary if fidelity else None, "pairs": fidelity and metric.pairs}


def outputs_path(host, out_dir: Path, index: int) -> str:
    """Where the runner writes job `index`'s evaluation outputs (on the device for an SSH
    target)."""
    name = f"outputs-{index}.npz"
    return host.path(name) if host is not None else str(out_dir / name)


def custom_score(ctx, host, path: str) -> dict:
    """Score the outputs the runner wrote with the user's metric function (fetched from
    the device first for an SSH target)."""
    from compress.metric import score_outputs
    from runtimes.feeds import read_outputs
    if host is None:
        return score_outputs(ctx, read_outputs(path)[1])
    proc = host.connection.run(["cat", path], timeout=300, check=True)
    if proc.returncode != 0:
        raise RemoteError(f"target {host.name}: could not read the outputs back from "
                          f"{path}: {proc.stderr.decode(errors='replace')[-300:]}")
    with tempfile.NamedTemporaryFile(suffix=".npz") as local:
        local.write(proc.stdout)
        local.flush()
        return score_outputs(ctx, read_outputs(local.name)[1])
