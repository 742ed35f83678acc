"""`benchmark`: every final artifact and the FP32 baselines, on each target that runs them,
each by the runner in a fresh subprocess (`python -m runtimes bench`, or `lm-bench` for a
language model: numpy and the runtime only, so torch here never pollutes memory or
timing; the same code runs on a device). One rounds loop for every kind of model: what
differs is the workload (compress/measure/workloads.py), read from the format table."""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, replace
from typing import Literal, Optional

from pydantic import (Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt,
                      model_validator)

from compress.measure.inputs import custom_score
from compress.measure.lm_sweep import LMSweep
from compress.measure.copies import Copies
from compress.measure.records import by_device, spread
from compress.measure.workloads import Prepared, RunnerPaths, of_jobs
from compress.measure.noise import measure_close
from compress.measure.screen import Screen
from compress.measure.dispatch import Item, dispatch
from compress.measure.client import AUTO, baseline_engines, device_flags, engine_for
from compress.measure.exits import Unavailable, unmeasured
from compress.stagebase import StageConfig, register
from runtimes import engines
from runtimes import formats
from runtimes.result import Measurement


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
    new_tokens: PositiveInt = Field(64, description="language models: tokens generated per "
                                    "run (prompt: the profile's language_model.prompt_tokens)")
    sweep: Optional[LMSweep] = Field(None, description="language models: more prompts, threads")
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
    max_drop: float | None = None        # the profile's accuracy_drop: engine auto weighs it
    where: str = "here"                  # the place that measures it: a target's own Python
    #                                      or device fleet (measurements shared only within)
    comparison: bool = False             # a baseline on another of the target's engines: only
    #                                      for that engine's speed-ups, never judged

    @property
    def threads(self) -> int:
        return self.settings.threads


def plan_jobs(candidates, targets, cores: dict[str, int],
              where: dict[str, str] | None = None) -> tuple[list[Job], list[dict]]:
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
            if formats.is_language(artifact.format):   # each format has one engine
                engine, others = formats.engines_of(artifact.format)[0], ()
                engine = engine if runtime.runs_language(engine) else None
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
                      profile.budget.accuracy_drop, (where or {}).get(target, "here"))
            jobs += [job] + [replace(job, engine=other, comparison=True)
                             for other in others]
    return jobs, skipped


class _Rounds:
    """What the rounds of one benchmark share (the measurements made so far, the jobs
    settled without timing), guarded for measurements made on devices side by side."""

    def __init__(self, jobs: list[Job], ctx, config: Benchmark, prepared: Prepared, workload):
        self.jobs, self.ctx, self.config = jobs, ctx, config
        self.prepared, self.workload, self.files = prepared, workload, prepared.files
        self.screen = Screen(ctx, config, prepared.metric)
        self.keys = [self.screen.key(job) for job in jobs]
        self.twins: dict[int, int] = {}   # job -> an earlier job measured the same way
        self.rounds = {index: [] for index in range(len(jobs))}
        self.done: dict[int, dict] = {}   # job -> its record without timing: unmeasured,
        #                                   not timed, or a measurement this search made
        self.copies = Copies(jobs, ctx, self.files, config.rounds)
        self.lock = threading.Lock()

    def todo(self) -> list[int]:
        return [i for i in range(len(self.jobs)) if i not in self.done and i not in self.twins]

    def measure(self, index: int, place, round_index: int) -> None:
        job = self.jobs[index]
        with self.lock:
            if round_index == 0 and _settled(index, job, self.keys[index], self.screen,
                                             self.done, self.twins):
                return
        try:
            result = self._measure_once(index, place, round_index)
        except Unavailable as exc:   # EngineLeftOut, RunnerDied: exits.unmeasured
            said, why = unmeasured(exc)
            with self.lock:
                self.done[index] = _untimed(job, unmeasured=str(exc), **why)
            self.ctx.progress.note(f"{job.artifact.id} on {job.target}: {said}: {exc}")
            return
        with self.lock:
            self.rounds[index].append(result)
            if round_index == 0:
                self.screen.saw(job, result, self.keys[index], index)
            if job.engine == AUTO:  # the later rounds time the engine the probe chose
                self.jobs[index] = replace(job, engine=result.engine_choice["chosen"])

    def _measure_once(self, index: int, place, round_index: int) -> Measurement:
        """One round of one job on one device: the runner's result (the workload's round;
        its metric in the first round only, which does not change between rounds; a
        custom metric scored here from the outputs it wrote). Raises Unavailable, and
        places.DeviceLost when the device's connection fails."""
        job, config, ctx = self.jobs[index], self.config, self.ctx
        inputs, evaluation, metric_info = self.files
        artifact = job.artifact
        paths = self.copies.paths(index, place)   # where the files are there (none: here)
        model, batch, evaluate = (paths.get(path, str(path)) if path else None
                                  for path in (ctx.path(artifact), inputs, evaluation))
        outputs = place.outputs_path(ctx.out_dir, f"outputs-{index}.npz")
        # a comparison is timed only: the metric and placement are the baseline record's
        first = round_index == 0 and not job.comparison
        args = self.workload.args(RunnerPaths(model, batch, evaluate, outputs), job, config,
                                  self.prepared, first, ctx)
        device = f" on {place.label}" if ctx.fleets[job.target].size > 1 else ""
        # the engine named: a baseline is also timed on the target's other engines
        label = (f"benchmark {artifact.id} on {job.target}{device}, engine {job.engine} "
                 f"({job.threads} threads, "
                 + (f"round {round_index + 1} of {config.rounds})" if round_index < config.rounds
                    else "an extra round)"))
        with ctx.progress.task(label, math.ceil(config.runs / config.rounds)) as advance:
            result = self.workload.result(*place.run(self.workload.command, args,
                                                     config.timeout_s, advance), place.label)
        if first and evaluate and metric_info and metric_info["custom"]:
            fidelity = (result.metric or {}).get("details") or {}
            metric = custom_score(ctx, place, outputs)
            metric["details"] = {**fidelity, **metric["details"]}
            metric["samples"] = len(ctx.dataset("evaluation"))
            result = result.replace(metric=metric)
        return result

    def records(self) -> list[dict]:
        records = [self.done.get(index) or (None if index in self.twins else
                                            self._record(index, job))
                   for index, job in enumerate(self.jobs)]
        for index, first in self.twins.items():
            records[index] = self.screen.copy_for(records[first], self.jobs[index])
        for key, made in zip(self.keys, records):
            self.screen.remember(key, made)
        return records

    def _record(self, index: int, job: Job) -> dict:
        rounds, fleet = self.rounds[index], self.ctx.fleets[job.target]
        made = self.workload.record(
            rounds, job, self.prepared,
            next((p for p in fleet.opened if p.label == rounds[0].device), None),
            self.ctx, self.config)
        if fleet.size > 1:   # a fleet: each board's own figures beside the pooled ones
            made["devices"] = by_device(rounds)
            made["device_spread"] = spread(made["devices"])
        return made


def _items(rounds: _Rounds, round_index: int) -> list[Item]:
    """This round's measurements: a job's rounds rotate over its target's boards."""
    position: dict[str, int] = {}
    items = []
    for index in rounds.todo():
        target = rounds.jobs[index].target
        position[target] = position.get(target, -1) + 1
        items.append(Item(index, rounds.ctx.fleets[target], position[target], round_index))
    return items


@register(Benchmark, produces_artifacts=False)
def run(jobs: list[Job], config: Benchmark, ctx) -> list[dict]:
    """`jobs`: what plan_jobs made of the candidates and the pipeline's targets."""
    workload = of_jobs(jobs)   # the format table's: feeds timed, or tokens/s
    prepared = workload.prepare(jobs, config, ctx)
    # an `auto` job becomes its chosen engine's after the first round
    state = _Rounds(list(jobs), ctx, config, prepared, workload)
    for round_index in range(config.rounds):
        _round(state, round_index)
    measure_close(state, lambda at, only: _round(state, at, only), config.rounds,
                  ctx.progress.note)
    return workload.finish(state.records(), jobs, config, ctx)


def _round(state: _Rounds, round_index: int, only: Optional[list[int]] = None) -> None:
    """One round of every job still timed (`only`: of those jobs)."""
    dispatch([i for i in _items(state, round_index) if only is None or i.index in only],
             lambda index, place: state.measure(index, place, round_index),
             state.ctx.progress.note)


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
