"""A run's artifacts and measurements: the source, each stage (reused where its cache key
matches one made before, here or by another run into the shared stage cache), the
baselines the benchmark needs, and the benchmark itself.
"""
from __future__ import annotations

import time

from compress.config.data import DATA_ROLES
from compress.core.artifacts import Artifact, StageDir, cache_key
from compress.core.stage_cache import Untrusted
from compress.errors import CompressError, StageError
from compress.measure.fleet import close_fleets
from compress.model.source import external_digest, source_digest, write_source
from compress.model.verify import verify_outputs
from compress.runner.baselines import baseline_config, exported_from, formats_needed
from compress.runner.context import RunContext
from compress.runner.manifest import package_versions
from compress.stagebase import STAGES
from compress.stages.benchmark import plan_jobs
from runtimes import formats


def _versions_key() -> dict:
    return {k: v for k, v in package_versions().items() if v is not None}


def _run_stage(ctx: RunContext, slug: str, key: str, make, artifact_id: str | None = None,
               parent_id: str | None = None) -> list[Artifact]:
    stage_dir = StageDir(ctx.run_dir, slug, artifact_id, ctx.stage_cache)
    if not ctx.force:
        cached = stage_dir.cached(key)
        if cached is not None:
            ctx.progress.note(f"{slug}: reused (inputs and settings unchanged)")
            return cached
        try:
            cached = stage_dir.from_shared(key, parent_id)
        except Untrusted as exc:   # a planted entry: a miss, said; the stage is made
            ctx.progress.note(f"warning: {slug}: {exc}")
            cached = None
        if cached is not None:
            ctx.progress.note(f"{slug}: reused from the stage cache (another run made it "
                              "with the same input and settings)")
            ctx.committed.append(stage_dir.final)
            return cached
    ctx.out_dir = stage_dir.begin()
    started = time.perf_counter()
    try:
        outputs, stage, parent, config = make()
        seconds = time.perf_counter() - started
        for output in outputs:  # what the stage cost (a reused stage keeps its own figure)
            output.meta["seconds"] = round(seconds, 3)
        committed = stage_dir.commit(key, outputs, stage, parent, config)
        ctx.committed.append(stage_dir.final)
        ctx.progress.note(f"{slug}: done in {seconds:.1f} s")
        return committed
    finally:
        stage_dir.abort()  # no-op after a commit; removes a failed stage's files
        ctx.out_dir = None


def _data_digests(ctx: RunContext) -> dict:
    digests = {role: (ctx.dataset(role).digest if ctx.dataset(role) else None)
               for role in DATA_ROLES}
    return {**digests, "text": ctx.text_digest()} if ctx.pipeline.data.text else digests


def _stage_key(ctx: RunContext, stage, parent: Artifact) -> tuple[str, dict]:
    # `input` is in the key as the parent's digest: a stage that names `input: source` and
    # one that follows the source directly are the same work
    settings = stage.model_dump(mode="json", exclude={"name", "input"})
    # how the model is fed is not in the parent's bytes (a torch checkpoint is the same
    # for a fixed and a dynamic batch) but decides what an export makes
    feeding = ctx.pipeline.model.model_dump(mode="json", include={"inputs", "dynamic_batch"})
    return cache_key(stage.type, stage.cache_version, settings, parent.sha256,
                     _data_digests(ctx), _versions_key(),
                     external_digest(stage.external_inputs(), ctx.pipeline), feeding), settings


def _run_one(ctx: RunContext, index: int, stage, parent: Artifact, slug: str,
             artifact_id: str | None) -> tuple[str, list[Artifact]]:
    spec = STAGES[stage.type]

    def make():
        outputs = spec.run(parent, stage, ctx)
        verify_outputs(outputs, ctx, f"stage {index} ({stage.type})")
        return outputs, stage.type, parent.id, settings
    try:  # the key reads the stage's own code too (a student factory): its errors are its
        key, settings = _stage_key(ctx, stage, parent)
        return key, _run_stage(ctx, slug, key, make, artifact_id=artifact_id,
                               parent_id=parent.id)
    except CompressError as exc:
        raise StageError(index, stage.type, str(exc)) from exc


def _run_stages(ctx: RunContext) -> tuple[list[Artifact], list[str], object, dict]:
    pipeline = ctx.pipeline
    source_key = cache_key("source", source_digest(pipeline), _versions_key())
    source = _run_stage(ctx, "00-source", source_key, lambda: (
        [write_source(pipeline, ctx.source_model, ctx.out_dir)], "source", None, {}))[0]
    ctx.source_artifact = source
    if formats.is_language(source.format):   # before any export: can it fit a target at all?
        from compress.model.lm_memory import check_fits
        check_fits(ctx.path(source), ctx.targets, ctx.progress.note)
    by_name, artifacts, consumed, by_key = {"source": source}, [source], set(), {}
    previous, benchmark_stage = source, None
    for index, (stage, name) in enumerate(zip(pipeline.stages, pipeline.stage_names()), 1):
        if not STAGES[stage.type].produces_artifacts:
            benchmark_stage = (index, stage)
            break
        parent = by_name[stage.input] if stage.input else previous
        consumed.add(parent.id)
        key, produced = _run_one(ctx, index, stage, parent,
                                 f"{index:02d}-{stage.name or stage.type}", name)
        by_key[key] = produced[0]
        by_name[name] = previous = produced[0]
        artifacts.extend(produced)
    return artifacts, sorted(consumed), benchmark_stage, by_key


def _baselines(ctx: RunContext, picked: list[Artifact], by_key: dict) -> list[Artifact]:
    """The source model in each format the benchmark measures (see compress.runner.baselines):
    the source itself, or its FP32 export (reused when a stage already made it)."""
    source, found = ctx.source_artifact, []
    for fmt in formats_needed([source, *picked]):
        if source.format == fmt:
            found.append(source)
            continue
        if source.format != exported_from(fmt):
            continue  # an ONNX model is not converted to TFLite, nor TFLite to ONNX
        config = baseline_config(ctx.pipeline, fmt)
        key, _ = _stage_key(ctx, config, source)
        if key in by_key:
            found.append(by_key[key])
            continue
        slug = f"00-baseline-{fmt}"
        found.append(_run_one(ctx, 0, config, source, slug, f"baseline-{fmt}")[1][0])
    return found


def _candidates(artifacts: list[Artifact], consumed: list[str],
                chosen: tuple[str, ...] | None) -> list[Artifact]:
    """The artifacts to measure: those named in the benchmark stage, or else every final
    (unconsumed) deployable artifact (the graph check made sure named ones exist)."""
    deployable = [a for a in artifacts if formats.get(a.format).deployable]
    if chosen is None:
        return [a for a in deployable if a.id not in consumed]
    by_id = {a.id: a for a in artifacts}
    return [by_id[name] for name in chosen]


def _with_baselines(baselines: list[Artifact], picked: list[Artifact]) -> list[tuple]:
    return [(a, True) for a in baselines] + [(a, False) for a in picked if a not in baselines]


def _benchmark(ctx: RunContext, bench_stage, candidates) -> tuple[list[dict], list[dict],
                                                                   list[dict]]:
    """The measurements, the artifact x target pairs a profile's engines leave out, and
    the baselines' comparison runs on the targets' other engines."""
    if bench_stage is None or not ctx.targets:
        return [], [], []
    fleets = ctx.fleets
    cores = {name: fleets[name].cores for name, _ in ctx.targets}
    # measurements are shared (a search's memo) within one Python or one device fleet
    where = {name: name if fleets[name].remote else fleets[name].places[0].label
             for name, _ in ctx.targets}
    jobs, skipped = plan_jobs(candidates, ctx.targets, cores, where)
    index, stage = bench_stage
    bench_dir = StageDir(ctx.run_dir, f"{index:02d}-benchmark")
    ctx.out_dir = bench_dir.begin()
    try:
        benchmarks = STAGES["benchmark"].run(jobs, stage, ctx)
    except CompressError as exc:
        raise StageError(index, "benchmark", str(exc)) from exc
    finally:
        bench_dir.abort()
        ctx.out_dir = None
        ctx.cleanup_warnings += close_fleets(fleets)
    comparisons = [b for b in benchmarks if b["comparison"]]
    benchmarks = [b for b in benchmarks if not b["comparison"]]
    skipped += [_not_measured(b) for b in benchmarks if "unmeasured" in b]
    benchmarks = [b for b in benchmarks if "unmeasured" not in b]
    for bench in benchmarks + comparisons:  # with the clean-up time, known only now
        if bench.get("remote"):
            place = next(p for p in fleets[bench["target"]].opened
                         if p.label == bench["remote"]["host"])
            bench["remote"].update(place.times())
    return benchmarks, skipped, comparisons


def _not_measured(bench: dict) -> dict:
    """The pair a benchmark record without numbers leaves: an accelerator not on the
    measuring machine (or an engine that cannot open the model), an honest 'unmeasured';
    a runner killed by a signal (`died`), the variant failed there (judging.py)."""
    row = {"artifact": bench["artifact"], "target": bench["target"],
           "reason": bench["unmeasured"], "unmeasured": "died" not in bench,
           "baseline": bench["baseline"], "drop": bench.get("drop")}
    return {**row, "died": bench["died"]} if "died" in bench else row


def produce(ctx: RunContext) -> tuple[list, list, list, list]:
    """Stages, baselines and benchmark: (artifacts, benchmarks, skipped pairs, the
    baselines' runs on other engines); with ctx.compress_only, no benchmark."""
    artifacts, consumed, bench_stage, by_key = _run_stages(ctx)
    chosen = bench_stage[1].artifacts if bench_stage else None
    picked = _candidates(artifacts, consumed, chosen)
    baselines = _baselines(ctx, picked, by_key) if bench_stage else []
    # after the source, which they stand for: the stages' own artifacts stay last
    artifacts[1:1] = [b for b in baselines if b not in artifacts]
    if ctx.compress_only:
        return artifacts, [], [], []
    measured = _benchmark(ctx, bench_stage, _with_baselines(baselines, picked))
    return (artifacts, *measured)
