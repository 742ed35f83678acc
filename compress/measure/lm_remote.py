"""A language model's sweep points on an SSH target (the rounds themselves go through the
benchmark's places like any other model's): every variant's files copied to the
device with the runner (one temporary folder, removed when the benchmark ends), then
`python -m runtimes lm-bench` run there, a fresh process per measurement, the variants in
turn within each round, on the host's prompt ids and the profile's accelerator: the same
summaries as on this machine (runtimes/lm/bench.py). A fleet measures on its first
device. Quality is not measured here: it does not depend on where a model runs.
"""
from __future__ import annotations

from pathlib import Path


def _files_of(path: Path, name: str) -> tuple[dict[Path, str], str]:
    """({local file: its name on the device}, the name lm-bench is given): a folder's
    files under `name`, or a file as `name`/its file name."""
    if path.is_dir():
        return ({f: f"{name}/{f.relative_to(path).as_posix()}"
                 for f in sorted(path.rglob("*")) if f.is_file()}, name)
    return {path: f"{name}/{path.name}"}, f"{name}/{path.name}"


def remote_speeds(jobs, config, ctx, workload) -> list[dict]:
    """Every job of one SSH target measured there, `config.rounds` rounds; a summary per
    job, in order. Unavailable (compress.measure.client) when the device's engine cannot
    run on the profile's accelerator."""
    from runtimes.lm.bench import summarize
    target = jobs[0].target
    place = ctx.fleets[target].places[0]
    files, paths = {}, []
    for job in jobs:
        found, name = _files_of(ctx.path(job.artifact), f"models/{job.artifact.id}")
        files.update(found)
        paths.append(name)
    engines = tuple(dict.fromkeys(job.engine for job in jobs))
    place.hold(files, engines, note=ctx.progress.note)   # once per device, for every point
    paths = [place.where(name) for name in paths]
    runs: list[list[dict]] = [[] for _ in jobs]
    label = (f"tokens/s on {target} over SSH ({place.label}, {workload.threads} threads, "
             f"{config.rounds} rounds)")
    with ctx.progress.task(label, len(jobs) * config.rounds) as advance:
        for round_index in range(config.rounds):
            for n, path in enumerate(paths):
                runs[n].append(place.run_json("lm-bench", [path, *workload.flags()],
                                              config.timeout_s))
                advance(completed=round_index * len(jobs) + n + 1)
    return [{**summarize(r), "remote": {"host": place.label}} for r in runs]
