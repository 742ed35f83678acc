"""What a language model's benchmark adds to the rounds loop (compress/stages/benchmark.py,
its tokens workload in workloads.py): quality once per variant on this machine
(perplexity, mean KL and top-1 agreement against the float export's logits on the
evaluation ids, greedy agreement on the prompts: numbers that do not depend on where
they run), the record of a job's rounds, and the sweep's extra points (`sweep:`: more
prompt lengths and threads, measured after the rounds, here, in the target's `python:`
or on its SSH device: lm_remote.py).

A record has the keys of a tensor model's (report.json's `benchmarks`), its latency the
time of one decode step (one generated token) with its rounds' p90s and interval, and a
`language_model` part: decode and prefill tokens/s, time to first token, load time, the
memory apart (the runtime's base, the loaded model), the weights and the KV cache at the
profile's context length."""
from __future__ import annotations

from pathlib import Path

from compress.errors import ModelError, StageError

GREEDY_TOKENS = 16   # generated on each prompt by the float model and each variant


def _baselines(jobs) -> dict[str, object]:
    """{format: its float export}: each variant is scored against its own format's."""
    found = {job.artifact.format: job.artifact for job in jobs if job.is_baseline}
    missing = {job.artifact.format for job in jobs} - set(found)
    if missing:
        raise ModelError("a language model's benchmark compares with the float export: put "
                         "an export.genai (or export.gguf) stage in the pipeline")
    return found


def _open(ctx, artifact, text):
    """The artifact's model, with room for a scored window and a prompt's generation."""
    from runtimes.lm.engines import for_path
    path = ctx.path(artifact)
    room = max([text.window + 1, *(len(p) + GREEDY_TOKENS for p in text.prompts)])
    return for_path(path)[1].open(path, 2, all_logits=True, context=room + 1)


def _greedy_agreement(model, reference, prompts) -> float | None:
    """The share of the reference's greedy tokens a variant repeats before it first
    departs from them, over the prompts (1.0: identical generations)."""
    if not prompts:
        return None
    agreed = total = 0
    for prompt, expected in zip(prompts, reference):
        got = model.greedy(list(prompt), len(expected))
        same = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b),
                    min(len(got), len(expected)))
        agreed, total = agreed + same, total + len(expected)
    return agreed / total if total else None


def quality_of(jobs, ctx) -> dict[str, dict]:
    """{artifact id: its quality} against its format's float export, each scored once."""
    from runtimes.lm.quality import Reference
    text, found, references = ctx.lm_text(), {}, {}
    for fmt, baseline in _baselines(jobs).items():
        model = _open(ctx, baseline, text)
        references[fmt] = (Reference(model.logits, list(text.evaluation), text.window),
                           [model.greedy(list(p), GREEDY_TOKENS) for p in text.prompts],
                           f"{baseline.id}, the float export ({fmt})")
    for artifact in {job.artifact.id: job.artifact for job in jobs}.values():
        reference, expected, label = references[artifact.format]
        model = _open(ctx, artifact, text)
        quality = reference.score(model.logits).as_dict()
        quality.update(greedy_agreement=_greedy_agreement(model, expected, text.prompts),
                       baseline_model=label)
        found[artifact.id] = quality
        ctx.progress.note(f"{artifact.id}: perplexity {quality['perplexity']:.3f} "
                          f"({quality['perplexity_increase']:+.2%}), KL {quality['kl_mean']:.4f}")
    return found


def _metric(quality: dict) -> dict:
    """The record's metric: perplexity, its relative increase as the drop."""
    return {"name": "perplexity", "value": quality["perplexity"],
            "baseline": quality["reference_perplexity"],
            "baseline_model": quality["baseline_model"], "higher_is_better": False,
            "drop": quality["perplexity_increase"], "kl_mean": quality["kl_mean"],
            "top1_agreement": quality["top1_agreement"],
            "greedy_agreement": quality["greedy_agreement"], "tokens": quality["tokens"]}


def record(job, speed: dict, quality: dict, settings: dict) -> dict:
    """The report's row for one variant on one target."""
    from compress.measure.noise import of_rounds
    from runtimes.lm.engines import for_path
    path, context = Path(settings["path"]), settings["context_tokens"]
    steps = [ms for run in speed["runs"] for ms in run["step_ms"]]
    kv_bytes = for_path(path)[1].kv_cache_bytes(path, context)
    return {
        "artifact": job.artifact.id, "format": job.artifact.format, "target": job.target,
        "baseline": job.is_baseline, "comparison": False, "engine": speed["engine"],
        "engine_choice": None, "runtime": settings["runtime"],
        "measured_on": speed["measured_on"],
        "latency_ms": of_rounds([run["step_ms"] for run in speed["runs"]]),
        "throughput_per_s": speed["decode_tok_s"], "runs": len(steps), "batch_size": 1,
        "peak_memory_mb": max(run["peak_rss_mb"] for run in speed["runs"]),
        "idle_memory_mb": speed["rss_base_mb"],
        "model_memory_mb": speed["rss_loaded_mb"] - speed["rss_base_mb"],
        "size_bytes": speed["weights_bytes"], "energy_mj": None,
        "energy_note": "no power meter is read for language models yet",
        "runner_wall_s": None, "load_ms": speed["load_s"] * 1000,
        "first_run_ms": speed["ttft_s"] * 1000, "power": None, "conditions": None,
        "placement": None, "metric": _metric(quality), "torch_loaded": speed["torch_loaded"],
        "remote": speed.get("remote"), "emulated": speed["measured_on"].get("emulated"),
        "language_model": {
            "decode_tok_s": speed["decode_tok_s"], "prefill_tok_s": speed["prefill_tok_s"],
            "ttft_ms": speed["ttft_s"] * 1000, "load_s": speed["load_s"],
            "prompt_tokens": speed["prompt_tokens"], "new_tokens": settings["new_tokens"],
            "threads": speed["threads"], "rounds": len(speed["runs"]),
            "spread": speed["spread"], "noisy": speed["noisy"],
            "weights_bytes": speed["weights_bytes"], "context_tokens": context,
            "kv_cache_bytes": kv_bytes,
            "weights_and_kv_cache_mb": (speed["weights_bytes"] + kv_bytes) / 2**20,
            "generated_ids": speed["generated_ids"]}}


def _lm_settings(profile) -> tuple[int, int]:
    return profile.language_model.prompt_tokens, profile.language_model.context_tokens


def _speeds(jobs, config, ctx, where: "Where", point: tuple[int, int]) -> list[dict]:
    """Every job of one target timed in fresh processes, in turn within each round, at
    `point` (prompt tokens, threads): here (or in the target's Python), or on its SSH
    device (lm_remote.py)."""
    from runtimes.lm.bench import Workload, measure_in_processes
    (prompt_tokens, threads), target = point, jobs[0].target
    work = Workload(prompt_tokens, config.new_tokens, threads,
                    list(ctx.lm_text().evaluation[:prompt_tokens]), where.provider)
    if where.remote:
        from compress.measure.lm_remote import remote_speeds
        return remote_speeds(jobs, config, ctx, work)
    on = f" on {where.provider.name}" if where.provider else ""
    label = (f"tokens/s on {target}{on} ({prompt_tokens}-token prompt, {threads} threads, "
             f"{config.rounds} rounds)")
    with ctx.progress.task(label, len(jobs) * config.rounds) as advance:
        try:
            return measure_in_processes([ctx.path(job.artifact) for job in jobs], work,
                                        config.rounds, lambda done, _: advance(completed=done),
                                        where.python)
        except RuntimeError as exc:
            raise StageError(0, "benchmark", str(exc)) from None


class Where:
    """Where a target's language-model runs happen: on its SSH device, or here in a
    Python (the target's `python:`, else this one); on the accelerator of its profile's
    providers (else the CPU)."""

    def __init__(self, ctx, target: str):
        import sys

        from runtimes.lm.provider import LMProvider
        place = ctx.fleets[target].places[0]
        self.remote = place.remote
        self.python = getattr(place, "python", None) or sys.executable
        self.label = place.label if self.remote else self.python
        self.provider = LMProvider.of_profile(dict(ctx.targets)[target].runtime.providers)
        self.key = (place.label, self.provider)


def add_sweeps(records: list[dict], jobs, config, ctx) -> list[dict]:
    """The records with each measured job's sweep points (`config.sweep`), per target."""
    if config.sweep is None:
        return records
    by_job = {(r["artifact"], r["target"]): r for r in records if "language_model" in r}
    timed: dict = {}
    for target in dict.fromkeys(job.target for job in jobs):
        mine = [job for job in jobs if (job.artifact.id, target) in by_job
                and job.target == target]
        for job, sweep in zip(mine, _sweeps(mine, config, ctx, timed) if mine else ()):
            by_job[(job.artifact.id, target)]["language_model"]["sweep"] = sweep
    return records


def _sweeps(jobs, config, ctx, timed: dict) -> list[list[dict]]:
    """Each job's points of the benchmark's `sweep:` (lm_sweep.py), in the order asked."""
    from compress.measure.lm_sweep import sweep_point
    found: list[list[dict]] = [[] for _ in jobs]
    if config.sweep is None:
        return found
    main = (_lm_settings(dict(ctx.targets)[jobs[0].target])[0], jobs[0].threads)
    for prompt_tokens, threads in config.sweep.points(*main):
        speeds = _shared_speeds(jobs, config, ctx, timed, (prompt_tokens, threads))
        for n, speed in enumerate(speeds if not isinstance(speeds, str) else ()):
            found[n].append(sweep_point(speed, prompt_tokens, threads))
    return found


def _shared_speeds(jobs, config, ctx, timed: dict, point: tuple[int, int]) -> list[dict] | str:
    """One target's speeds at `point` (prompt tokens, threads), or why it has none:
    targets measured in the same place on the same accelerator at the same point share
    their runs (`timed`)."""
    from compress.measure.client import Unavailable
    from runtimes.errors import ProviderUnavailable
    where = Where(ctx, jobs[0].target)
    key = (where.key, point, tuple(job.artifact.id for job in jobs))
    if key not in timed:
        try:
            timed[key] = _speeds(jobs, config, ctx, where, point)
        except (ProviderUnavailable, Unavailable) as exc:
            timed[key] = f"not available in {where.label}: {exc}"
    return timed[key]
