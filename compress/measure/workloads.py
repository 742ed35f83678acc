"""What the benchmark times, one unit per workload of the format table (runtimes/formats.py:
a format's kind gives it): a tensor model's calls on feeds (`python -m runtimes bench`)
or a language model's prefill and decode (`python -m runtimes lm-bench`).

The rounds loop (compress/stages/benchmark.py) is one for both kinds: places, SSH
targets and fleets, screening, the variants in turn within each round, extra rounds
when they spread, intervals and ties by noise. A workload only says what is prepared
once (inputs and the metric; a language model's quality, which does not depend on where
it runs), the runner command and arguments of one round, what a round's answer is, and
how a job's rounds become its record (report.json's `benchmarks` row).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from compress.measure.client import engine_flags, min_metric_flag, reports_placement
from compress.measure.records import pool_rounds, record
from runtimes import formats


@dataclass
class Prepared:
    """What every round of a benchmark reads: the timed inputs and the evaluation data
    (None: none), the metric (None: none), and a language model's quality per artifact."""
    inputs: Optional[Path] = None
    evaluation: Optional[Path] = None
    metric: Optional[dict] = None
    quality: dict = field(default_factory=dict)

    @property
    def files(self) -> tuple:
        return self.inputs, self.evaluation, self.metric


@dataclass(frozen=True)
class RunnerPaths:
    """One round's files as the measuring machine sees them: the model, the timed inputs
    and the evaluation data (None: none), and where a custom metric's outputs go."""
    model: str
    inputs: Optional[str] = None
    evaluation: Optional[str] = None
    outputs: str = ""


@dataclass(frozen=True)
class Workload:
    command: str              # python -m runtimes <command>
    prepare: Callable         # (jobs, config, ctx) -> Prepared
    args: Callable            # (RunnerPaths, job, config, Prepared, first round, ctx) -> argv
    result: Callable          # (answer, wall s, device label) -> one round's result
    record: Callable          # (rounds, job, Prepared, place, ctx, config) -> its record
    finish: Callable = lambda records, jobs, config, ctx: records   # after every round


def of_jobs(jobs) -> Workload:
    """The workload of a benchmark's jobs (one model kind per pipeline)."""
    kinds = {formats.get(job.artifact.format).workload for job in jobs}
    return WORKLOADS[kinds.pop() if len(kinds) == 1 else formats.LATENCY]


# ---- a tensor model: calls on feeds ------------------------------------------------------

def _prepare_latency(jobs, config, ctx) -> Prepared:
    from compress.measure.inputs import write_inputs
    prepared = Prepared(*write_inputs(ctx, ctx.out_dir))
    if prepared.metric is not None:
        prepared.metric["drop"] = ctx.metric().drop
    return prepared


def latency_args(paths: RunnerPaths, job, config, prepared: Prepared, first_round: bool = True,
                 ctx=None) -> list[str]:
    """What follows `python -m runtimes bench`. The metric and the op placement do not
    change between rounds: the first one has them."""
    metric = prepared.metric
    cmd = [str(paths.model), "--json", "--progress",
           "--samples", "--threads", str(job.threads), "--warmup", str(config.warmup),
           "--runs", str(math.ceil(config.runs / config.rounds)),
           "--seconds", str(config.min_seconds / config.rounds),
           "--eval-batch", str(config.eval_batch), *job.device_flags]
    if paths.inputs:
        cmd += ["--inputs", str(paths.inputs)]
    if job.artifact.meta.get("channels_last", False):
        cmd += ["--nhwc"]
    cmd += engine_flags(job.engine, job.settings, job.artifact.format)
    if first_round and reports_placement(job.engine, job.settings):
        cmd += ["--placement"]
    if paths.evaluation and first_round:
        cmd += ["--eval", str(paths.evaluation)]
        if metric["custom"]:  # scored on this side, by the user's function
            return cmd + ["--save-outputs", paths.outputs]
        cmd += ["--metric", metric["name"], *min_metric_flag(job.engine, job.max_drop, metric)]
        if metric.get("primary"):
            cmd += ["--primary", metric["primary"]]
        if metric.get("pairs"):
            cmd += ["--pairs"]
    return cmd


def _latency_result(answer: dict, wall_s: float, device: str):
    from compress.measure.places import measurement
    return measurement(answer, wall_s, device)


def _latency_record(rounds, job, prepared: Prepared, place, ctx, config) -> dict:
    return record(pool_rounds(rounds), job, prepared.metric, place)


# ---- a language model: prefill and decode --------------------------------------------------

@dataclass(frozen=True)
class TokensRound:
    """One lm-bench run: its answer (runtimes/lm/bench.py's `measure`); its latency
    samples are the decode steps' times, so the rounds loop settles and ties them like
    any other's."""
    answer: dict
    wall_s: float
    device: str
    metric = None           # quality is scored once, on this machine (Prepared.quality)
    engine_choice = None    # a language-model format has one engine

    @property
    def latency_samples_ms(self) -> list[float]:
        return self.answer["step_ms"]


def _prepare_tokens(jobs, config, ctx) -> Prepared:
    from compress.measure.lm import quality_of
    from compress.measure.lm_sweep import check_prompts
    check_prompts(config.sweep, len(ctx.lm_text().evaluation) - 1)
    return Prepared(quality=quality_of(jobs, ctx))


def _tokens_args(paths: RunnerPaths, job, config, prepared: Prepared, first_round: bool,
                 ctx) -> list[str]:
    """lm-bench's arguments for `job`'s target: its profile's prompt length (cut from the
    evaluation ids, so every format gets the same), the benchmark's new tokens, the job's
    threads, the profile's accelerator."""
    from runtimes.lm.bench import Workload as LMWorkload
    from runtimes.lm.provider import LMProvider
    profile = dict(ctx.targets)[job.target]
    tokens = profile.language_model.prompt_tokens
    work = LMWorkload(tokens, config.new_tokens, job.threads,
                      list(ctx.lm_text().evaluation[:tokens]),
                      LMProvider.of_profile(profile.runtime.providers))
    return [str(paths.model), *work.flags()]


def _tokens_record(rounds, job, prepared: Prepared, place, ctx, config) -> dict:
    from compress.measure.lm import record as lm_record
    from runtimes.lm.bench import summarize
    profile = dict(ctx.targets)[job.target]
    speed = summarize([r.answer for r in rounds])
    if place is not None and place.remote:
        speed["remote"] = place.times()
    settings = {"path": ctx.path(job.artifact),
                "context_tokens": profile.language_model.context_tokens,
                "new_tokens": config.new_tokens,
                "runtime": {"engine": job.engine, "threads": job.threads,
                            "version": speed.get("engine_version"),
                            "provider": speed.get("provider")}}
    return lm_record(job, speed, prepared.quality[job.artifact.id], settings)


def _tokens_finish(records, jobs, config, ctx):
    from compress.measure.lm import add_sweeps
    return add_sweeps(records, jobs, config, ctx)


WORKLOADS = {
    formats.LATENCY: Workload("bench", _prepare_latency, latency_args, _latency_result,
                              _latency_record),
    formats.TOKENS: Workload("lm-bench", _prepare_tokens, _tokens_args, TokensRound,
                             _tokens_record, _tokens_finish),
}
