"""`benchmark`: every final artifact and the FP32 baselines, on each target that runs them.

Each measurement is `python -m runtimes bench` in a fresh subprocess: it imports only
numpy and the runtime, so torch in this process never pollutes memory or timing, and
it is the same code that runs on a device.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from typing import Literal, Optional

from pydantic import (Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt,
                      model_validator)

from compress.artifacts import artifact_files
from compress.bench_inputs import custom_score, outputs_path, write_inputs
from compress.bench_records import pool_rounds, record
from compress.bench_screen import Screen
from compress.measuring import (AUTO, Unavailable, baseline_engines, engine_flags, engine_for,
                                measure_in_subprocess, needed_engines, reports_placement)
from compress.stagebase import StageConfig, register
from runtimes import engines


class Benchmark(StageConfig):
    type: Literal["benchmark"] = Field("benchmark", description="measure every final "
                                       "artifact and the baselines on every target")
    warmup: NonNegativeInt = Field(10, description="untimed runs first (caches, allocations)")
    runs: PositiveInt = Field(100, description="timed runs (at least), over all rounds")
    min_seconds: NonNegativeFloat = Field(0.0, description="keep timing at least this long")
    rounds: PositiveInt = Field(
        3, description="measure the variants in turn this many times and pool the latencies, "
        "so drift on a busy machine hits every variant alike (ratios stay comparable)")
    eval_batch: PositiveInt = Field(32, description="batch for the metric when batch is dynamic")
    timeout_s: PositiveFloat = Field(900, description="give up on one measurement after this")
    artifacts: Optional[tuple[str, ...]] = Field(
        None, description="stage names whose ONNX or TFLite artifacts to measure beside the "
        "FP32 baselines (default: every final artifact, i.e. one no later stage consumed)")
    skip_over_budget: bool = Field(
        False, description="do not time a variant for a target whose size budget its file "
        "misses, or whose accuracy budget its metric (from its first measurement) misses: "
        "it is reported as not timed, with the budget it misses. A search sets it")

    @model_validator(mode="after")
    def _can_finish(self):
        # one measurement times min_seconds / rounds: past timeout_s it could never finish
        if self.min_seconds / self.rounds >= self.timeout_s:
            raise ValueError(f"min_seconds {self.min_seconds:g} over {self.rounds} rounds is "
                             f"{self.min_seconds / self.rounds:g} s per measurement, not under "
                             f"timeout_s {self.timeout_s:g}: lower min_seconds or raise timeout_s")
        return self


@dataclass(frozen=True)
class Job:
    """One artifact measured for one target, with that target's engine and settings."""
    artifact: object
    is_baseline: bool
    target: str
    engine: str                          # an engine's name, or measuring.AUTO
    settings: engines.Settings
    device_flags: tuple[str, ...] = ()   # power meter, CPU pinning: from the profile
    python: Optional[str] = None         # another local Python for the runner (the target's)
    comparison: bool = False             # a baseline on another of the target's engines: only
    #                                      for that engine's speed-ups, never judged

    @property
    def threads(self) -> int:
        return self.settings.threads


def device_flags(profile) -> tuple[str, ...]:
    """The runner's power-meter and pinning options for a profile."""
    power, defaults = profile.power, type(profile.power)()
    flags = []  # only what differs from the runner's own defaults (meter auto, idle 1 s)
    for option, key in (("--meter", "meter"), ("--idle-seconds", "idle_seconds"),
                        ("--meter-command", "command"), ("--meter-rail", "rail"),
                        ("--meter-interval-ms", "interval_ms")):
        value = getattr(power, key)
        flags += [option, f"{value:g}" if isinstance(value, float) else str(value)] \
            if value != getattr(defaults, key) else []
    if profile.runtime.cpu_affinity:
        flags += ["--cpus", ",".join(map(str, profile.runtime.cpu_affinity))]
    return tuple(flags)


def plan_jobs(candidates, targets, cores: dict[str, int],
              pythons: dict[str, str] | None = None) -> tuple[list[Job], list[dict]]:
    """Which artifact runs for which target, and the pairs left out with the reason: a
    profile measures only the formats its `runtime.engines` run (rpi4: TFLite only). A
    baseline is measured with the target's engine for its format and, as a comparison,
    on its other engines that run it. `cores`: how many cores measure each target."""
    jobs, skipped = [], []
    for artifact, is_baseline in candidates:
        for target, profile in targets:
            runtime = profile.runtime
            engine, others = (baseline_engines(runtime, artifact.format) if is_baseline
                              else (engine_for(runtime, artifact.format), ()))
            if engine is None:
                skipped.append({"artifact": artifact.id, "target": target, "reason":
                                f"{target} runs {runtime.listed()} only (runtime.engines in its "
                                f"profile): no {artifact.format} files"})
                continue
            # More threads than the cores it may use only measures contention.
            usable = min(cores[target], len(runtime.cpu_affinity or ()) or cores[target])
            settings = runtime.settings(min(runtime.threads or usable, usable),
                                   artifact.meta.get("inference_precision"))
            job = Job(artifact, is_baseline, target, engine, settings, device_flags(profile),
                      (pythons or {}).get(target))
            jobs += [job] + [dataclasses.replace(job, engine=other, comparison=True)
                             for other in others]
    return jobs, skipped


def _runner_args(path, inputs, evaluation, job: Job, config: Benchmark, metric,
                 nhwc: bool = False, first_round: bool = True, outputs: str = "") -> list[str]:
    """What follows `python -m runtimes bench` (paths as the measuring machine sees them).
    The metric and the op placement do not change between rounds: the first one has them."""
    cmd = [str(path), "--json", "--progress",
           "--samples", "--threads", str(job.threads), "--warmup", str(config.warmup),
           "--runs", str(math.ceil(config.runs / config.rounds)),
           "--seconds", str(config.min_seconds / config.rounds),
           "--eval-batch", str(config.eval_batch), *job.device_flags]
    if inputs:
        cmd += ["--inputs", str(inputs)]
    if nhwc:
        cmd += ["--nhwc"]
    cmd += engine_flags(job.engine, job.settings, job.artifact.format)
    if first_round and reports_placement(job.engine, job.settings):
        cmd += ["--placement"]
    if evaluation and first_round:
        cmd += ["--eval", str(evaluation)]
        if metric["custom"]:  # scored on this side, by the user's function
            return cmd + ["--save-outputs", outputs]
        cmd += ["--metric", metric["name"]]
        if metric.get("primary"):
            cmd += ["--primary", metric["primary"]]
        if metric.get("pairs"):
            cmd += ["--pairs"]
    return cmd


def _stage_on_hosts(jobs: list[Job], ctx, inputs, evaluation) -> dict:
    """Copy each SSH target's artifacts and the inputs to its device.
    {(job index): (host, model path there, inputs there, evaluation there)}."""
    placed, by_host = {}, {}
    for index, job in enumerate(jobs):
        if job.target in ctx.hosts:
            by_host.setdefault(job.target, []).append(index)
    for name, indices in by_host.items():
        host = ctx.hosts[name]
        # one folder per artifact, with its weights file where it has one (names kept:
        # an ONNX model refers to its external data by name)
        files = {part: f"models/{jobs[i].artifact.id}/{part.name}" for i in indices
                 for part in artifact_files(ctx.path(jobs[i].artifact))}
        files.update({path: f"inputs/{path.name}" for path in (inputs, evaluation) if path})
        # a comparison engine missing there only leaves that comparison unmeasured
        engines = needed_engines(jobs[i] for i in indices if not jobs[i].comparison)
        with ctx.progress.task(f"copy {len(indices)} models to {name} "
                               f"({host.spec.ssh.address})", None):
            host.stage(list(files.items()), engines)
        if host.swept:
            ctx.progress.note(f"target {name}: removed {len(host.swept)} folder(s) that killed "
                              f"runs left there ({', '.join(host.swept)})")
        ctx.progress.note(f"target {name}: {host.times.copied_bytes / 2**20:.1f} MiB copied in "
                          f"{host.times.copy_s:.2f} s")
        there = {path: host.path(name) for path, name in files.items()}
        for i in indices:
            placed[i] = (host, there[ctx.path(jobs[i].artifact)], there.get(inputs),
                         there.get(evaluation))
    return placed


def _measure_once(index: int, job: Job, round_index: int, placed: dict, files: tuple,
                  config: Benchmark, ctx) -> dict:
    """One round of one job: the runner's result (its metric in the first round only, which
    does not change between rounds; a custom metric scored here from the outputs it wrote).
    `files`: (timed inputs, evaluation data, metric info). Raises Unavailable."""
    inputs, evaluation, metric_info = files
    artifact = job.artifact
    host, model, batch, evaluate = placed.get(index, (None, ctx.path(artifact), inputs,
                                                      evaluation))
    outputs = outputs_path(host, ctx.out_dir, index)
    # a comparison is timed only: the metric and placement are the baseline record's
    first = round_index == 0 and not job.comparison
    args = _runner_args(model, batch, evaluate, job, config, metric_info,
                        artifact.meta.get("channels_last", False), first, outputs)
    cmd = (host.runner_command(args, config.timeout_s) if host else
           [job.python or sys.executable, "-m", "runtimes", "bench", *args])
    label = (f"benchmark {artifact.id} on {job.target} ({job.threads} threads, round "
             f"{round_index + 1}/{config.rounds})")
    started = time.perf_counter()
    with ctx.progress.task(label, math.ceil(config.runs / config.rounds)) as advance:
        result = measure_in_subprocess(cmd, config.timeout_s, advance, host)
    # The runner's whole wall time, start-up and (over SSH) the round trip included.
    result["wall_s"] = time.perf_counter() - started
    if first and evaluate and metric_info and metric_info["custom"]:
        fidelity = (result.get("metric") or {}).get("details") or {}
        result["metric"] = custom_score(ctx, host, outputs)
        result["metric"]["details"] = {**fidelity, **result["metric"]["details"]}
        result["metric"]["samples"] = len(ctx.dataset("evaluation"))
    if host:
        host.times.run_s.append(result["wall_s"])
    return result


@register(Benchmark, produces_artifacts=False)
def run(jobs: list[Job], config: Benchmark, ctx) -> list[dict]:
    """`jobs`: what plan_jobs made of the candidates and the pipeline's targets."""
    jobs = list(jobs)   # an `auto` job becomes its chosen engine's after the first round
    files = write_inputs(ctx, ctx.out_dir)
    metric_info = files[2]
    if metric_info is not None:
        metric_info["drop"] = ctx.metric().drop
    placed = _stage_on_hosts(jobs, ctx, files[0], files[1])
    screen = Screen(ctx, config, metric_info)
    keys = [screen.key(job) for job in jobs]
    twins: dict[int, int] = {}   # job -> an earlier job of this run measured the same way
    rounds = {index: [] for index in range(len(jobs))}
    done: dict[int, dict] = {}   # job -> its record without timing: unmeasured, not timed,
    #                              or a measurement this search already made
    for round_index in range(config.rounds):
        for index, job in enumerate(jobs):
            if index in done or index in twins:
                continue
            if round_index == 0 and _settled(index, job, keys[index], screen, done, twins):
                continue
            try:
                rounds[index].append(_measure_once(index, job, round_index, placed, files,
                                                   config, ctx))
                if round_index == 0:
                    screen.saw(job, rounds[index][0], keys[index], index)
                if job.engine == AUTO:  # the later rounds time the engine the probe chose
                    jobs[index] = dataclasses.replace(
                        job, engine=rounds[index][0]["engine_choice"]["chosen"])
            except Unavailable as exc:
                done[index] = _untimed(job, unmeasured=str(exc))
                ctx.progress.note(f"{job.artifact.id} on {job.target}: unmeasured: {exc}")
    records = [done.get(index) or (None if index in twins else record(
                   pool_rounds(rounds[index]), job, metric_info, ctx.hosts.get(job.target)))
               for index, job in enumerate(jobs)]
    for index, first in twins.items():
        records[index] = screen.copy_for(records[first], jobs[index])
    for key, made in zip(keys, records):
        screen.remember(key, made)
    return records


def _untimed(job: Job, **why) -> dict:
    return {"artifact": job.artifact.id, "target": job.target, "baseline": job.is_baseline,
            "comparison": job.comparison, "engine": job.engine, **why}


def _settled(index: int, job: Job, key, screen: Screen, done: dict, twins: dict) -> bool:
    """Whether the job needs no timing: over a budget checked first, or measured before
    in this search (then `done` has its record), or by an earlier job of this run (then
    `twins` names that job)."""
    skipped = screen.skip(job)
    if skipped:
        done[index] = _untimed(job, unmeasured=skipped[0], not_timed=True, drop=skipped[1])
        return True
    if key in screen.timed_here:
        twins[index] = screen.timed_here[key]
        return True
    recalled = screen.recall(key, job)
    if recalled:
        done[index] = recalled
    return recalled is not None
