"""Run a validated Pipeline: source -> stages -> benchmark -> verdicts -> report.

Everything that can be checked before work starts (profiles, model, data shapes, data a
stage needs) is checked first, so bad input fails before any file is written.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from compress.artifacts import Artifact, StageDir, cache_key
from compress.config import Pipeline
from compress.context import RunContext
from compress.errors import CompressError, ConfigError, DataError, StageError
from compress.manifest import build_manifest, package_versions
from compress.model_table import model_rows
from compress.model_source import (build_torch_model, check_onnx_file, check_tflite_file,
                                   check_torch_inputs, external_digest, source_digest,
                                   write_source)
from compress.progress import Progress
from compress.remote.targets import close_hosts, open_hosts
from compress.report import build_report, write_reports
from compress.stagebase import STAGES
from compress.stages.benchmark import plan_jobs
from profiles import (OFF_TARGET, PASS, UNMEASURED, ProfileError, check, load_profile,
                      unmeasured_verdicts)


@dataclass(frozen=True)
class Result:
    run_dir: Path
    artifacts: list[Artifact]
    benchmarks: list[dict]
    verdicts: list
    passed: bool
    report: dict = field(repr=False)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1


def resolve_targets(pipeline: Pipeline) -> tuple[list, set]:
    """[(profile name, Profile)] and the names of the gated targets."""
    targets, gated = [], set()
    for index, target in enumerate(pipeline.targets):
        try:
            profile = load_profile(target.profile, base_dir=str(pipeline.base_dir))
        except ProfileError as exc:
            raise ConfigError(str(exc), field=f"targets.{index}") from None
        name = target.name or profile.name
        if name in dict(targets):
            raise ConfigError(f"target '{name}' is listed twice; give one of them its own "
                              "`name:`", field=f"targets.{index}")
        targets.append((name, profile))
        if target.gate:
            gated.add(name)
    return targets, gated


def apply_target_defaults(pipeline: Pipeline, targets: list) -> Pipeline:
    """The pipeline with each stage's unset settings taken from the target profiles."""
    stages = []
    for index, stage in enumerate(pipeline.stages):
        try:
            stages.append(stage.for_targets(targets))
        except ValueError as exc:
            raise ConfigError(str(exc), field=f"stages.{index}") from None
    return pipeline.model_copy(update={"stages": tuple(stages)})


def accelerators_here(profile) -> bool:
    """Whether this machine has the profile's execution providers (its delegate is tried
    by the runner, which says 'unmeasured' when it cannot load it)."""
    if not profile.runtime.providers:
        return True
    import onnxruntime
    available = set(onnxruntime.get_available_providers())
    return all(p.name in available for p in profile.runtime.providers)


def _check_local_pythons(ctx: RunContext) -> None:
    """A local target's own Python must exist before any work starts."""
    for index, target in enumerate(ctx.pipeline.targets):
        if target.python and not target.ssh:
            path = ctx.pipeline.resolve(target.python)
            if not os.access(path, os.X_OK) or path.is_dir():
                raise ConfigError(f"python '{target.python}' is not an executable Python here "
                                  "(a local target's `python:` runs its benchmark; give the "
                                  "full path of that environment's python)",
                                  field=f"targets.{index}")


def _check_meters(ctx: RunContext) -> None:
    """A power meter a profile names must exist on this machine (for targets measured
    here; an SSH target's runner checks its own) before any work starts."""
    if not any(s.type == "benchmark" for s in ctx.pipeline.stages):
        return
    from runtimes.errors import RuntimeInputError
    from runtimes.meters import detect
    from runtimes.sysread import sysfs_root
    for index, target in enumerate(ctx.pipeline.targets):
        name, profile = ctx.targets[index]
        power = profile.power
        if target.ssh or target.python or power.meter in ("auto", "none"):
            continue  # another Python's runner checks its own meter
        if not accelerators_here(profile):
            continue  # an accelerator not here is 'unmeasured' anyway: its meter is moot
        try:
            detect(power.meter, rail=power.rail, command=power.command,
                   interval_ms=power.interval_ms, root=sysfs_root())
        except RuntimeInputError as exc:
            raise ConfigError(f"profile {name}: {exc}", field=f"targets.{index}") from None


def _preflight(ctx: RunContext) -> None:
    pipeline = ctx.pipeline
    for role in ("calibration", "evaluation"):
        ctx.dataset(role)
    for index, stage in enumerate(pipeline.stages, start=1):
        for role in stage.required_data():
            kind = next((getattr(stage, key) for key in ("scheme", "method", "mode")
                         if getattr(stage, key, None)), None)
            preset = getattr(stage, "preset", None)
            if preset and preset != "none":  # the preset may be what asked for int8
                kind = f"{kind}, preset {preset}" if kind else f"preset {preset}"
            ctx.require_dataset(role, f"stage {index} ({stage.type}{', ' + kind if kind else ''})")
    evaluation = ctx.dataset("evaluation")
    if evaluation is not None and ctx.metric().type == "accuracy" and evaluation.labels is None:
        raise DataError("data.metric is accuracy but data.evaluation has no labels; return "
                        "labels with the inputs, or use `metric: {type: fidelity}`")
    _check_meters(ctx)
    _check_local_pythons(ctx)
    if pipeline.model.onnx:
        check_onnx_file(pipeline.resolve(pipeline.model.onnx), pipeline)
    elif pipeline.model.tflite:
        check_tflite_file(pipeline.resolve(pipeline.model.tflite), pipeline)
    else:
        ctx.source_model = build_torch_model(pipeline)
        sample = ctx.dataset("calibration") or evaluation
        check_torch_inputs(ctx.source_model, pipeline, sample.inputs if sample else None)
    # Devices last: local mistakes are reported without touching the network.
    ctx.hosts = open_hosts(ctx)


def _versions_key() -> dict:
    return {k: v for k, v in package_versions().items() if v is not None}


def _run_stage(ctx: RunContext, slug: str, key: str, make, force: bool,
               artifact_id: str | None = None) -> list[Artifact]:
    stage_dir = StageDir(ctx.run_dir, slug, artifact_id)
    if not force:
        cached = stage_dir.cached(key)
        if cached is not None:
            ctx.progress.note(f"{slug}: reused (inputs and settings unchanged)")
            return cached
    ctx.out_dir = stage_dir.begin()
    started = time.perf_counter()
    try:
        outputs, stage, parent, config = make()
        committed = stage_dir.commit(key, outputs, stage, parent, config)
        ctx.committed.append(stage_dir.final)
        ctx.progress.note(f"{slug}: done in {time.perf_counter() - started:.1f} s")
        return committed
    finally:
        stage_dir.abort()  # no-op after a commit; removes a failed stage's files
        ctx.out_dir = None


def _roll_back(ctx: RunContext, created_run_dir: bool) -> None:
    """A failed run leaves the run directory as it found it: the stages it finished are
    removed too, so nothing from a run that ended in an error is reused later."""
    for stage_dir in ctx.committed:
        shutil.rmtree(stage_dir, ignore_errors=True)
    if created_run_dir and ctx.run_dir.is_dir() and not any(ctx.run_dir.iterdir()):
        ctx.run_dir.rmdir()


def _data_digests(ctx: RunContext) -> dict:
    return {role: (ctx.dataset(role).digest if ctx.dataset(role) else None)
            for role in ("calibration", "evaluation", "train")}


def _run_stages(ctx: RunContext, force: bool) -> tuple[list[Artifact], list[str], object]:
    pipeline = ctx.pipeline
    source_key = cache_key("source", source_digest(pipeline), _versions_key())
    source = _run_stage(ctx, "00-source", source_key, lambda: (
        [write_source(pipeline, ctx.source_model, ctx.out_dir)], "source", None, {}), force)[0]
    ctx.source_artifact = source
    by_name, artifacts, consumed = {"source": source}, [source], set()
    previous, benchmark_stage = source, None
    for index, (stage, name) in enumerate(zip(pipeline.stages, pipeline.stage_names()), 1):
        spec = STAGES[stage.type]
        if not spec.produces_artifacts:
            benchmark_stage = (index, stage)
            break
        parent = by_name[stage.input] if stage.input else previous
        consumed.add(parent.id)
        settings = stage.model_dump(mode="json", exclude={"name"})
        key = cache_key(stage.type, stage.cache_version, settings, parent.sha256,
                        _data_digests(ctx), _versions_key(),
                        external_digest(stage.external_inputs(), pipeline))

        def make(stage=stage, spec=spec, parent=parent, settings=settings):
            return spec.run(parent, stage, ctx), stage.type, parent.id, settings
        try:
            produced = _run_stage(ctx, f"{index:02d}-{stage.name or stage.type}", key, make,
                                  force, artifact_id=name)
        except CompressError as exc:
            raise StageError(index, stage.type, str(exc)) from exc
        by_name[name] = previous = produced[0]
        artifacts.extend(produced)
    return artifacts, sorted(consumed), benchmark_stage


def _candidates(artifacts: list[Artifact], consumed: list[str],
                chosen: tuple[str, ...] | None) -> list[tuple[Artifact, bool]]:
    """The FP32 baselines (the first FP32 model of each format: gains are measured against
    the same engine) plus the artifacts to measure: those named in the benchmark stage,
    or else every final (unconsumed) deployable artifact."""
    deployable = [a for a in artifacts if a.format in ("onnx", "tflite")]
    baselines = []
    for fmt in ("onnx", "tflite"):
        first = next((a for a in deployable if a.format == fmt and a.precision == "fp32"), None)
        baselines += [first] if first is not None else []
    if chosen is None:
        picked = [a for a in deployable if a.id not in consumed]
    else:
        by_id = {a.id: a for a in artifacts}
        for name in chosen:
            if name not in by_id or by_id[name] not in deployable:
                known = ", ".join(a.id for a in deployable)
                raise ConfigError(f"benchmark.artifacts: '{name}' is not an ONNX or TFLite "
                                  f"artifact of this pipeline; those are: {known}")
        picked = [by_id[name] for name in chosen]
    ordered = baselines + [a for a in picked if a not in baselines]
    return [(a, a in baselines) for a in ordered]


def _benchmark(ctx: RunContext, bench_stage, candidates) -> tuple[list[dict], list[dict]]:
    """The measurements, and the artifact x target pairs a profile's engines leave out."""
    if bench_stage is None or not ctx.targets:
        return [], []
    local_cores = os.cpu_count() or 1
    cores = {name: ctx.hosts[name].facts["cores"] if name in ctx.hosts else local_cores
             for name, _ in ctx.targets}
    pythons = {name: str(ctx.pipeline.resolve(target.python))
               for target, (name, _) in zip(ctx.pipeline.targets, ctx.targets)
               if target.python and not target.ssh}
    jobs, skipped = plan_jobs(candidates, ctx.targets, cores, pythons)
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
        ctx.cleanup_warnings += close_hosts(ctx.hosts)
    # An accelerator not on the measuring machine: no numbers, an honest 'unmeasured'.
    skipped += [{"artifact": b["artifact"], "target": b["target"], "reason": b["unmeasured"],
                 "unmeasured": True, "baseline": b["baseline"]}
                for b in benchmarks if "unmeasured" in b]
    benchmarks = [b for b in benchmarks if "unmeasured" not in b]
    for bench in benchmarks:  # with the clean-up time, known only now
        if bench["remote"]:
            bench["remote"].update(ctx.hosts[bench["target"]].times.to_dict())
    return benchmarks, skipped


def _verdicts(benchmarks: list[dict], skipped: list[dict], artifacts, ctx: RunContext) -> list:
    profiles = dict(ctx.targets)
    verdicts = []
    for bench in benchmarks:
        verdicts.extend(check(bench, profiles[bench["target"]], bench["artifact"], bench["target"]))
    sizes = {a.id: a.size_bytes for a in artifacts}
    for miss in (s for s in skipped if s.get("unmeasured")):
        verdicts.extend(unmeasured_verdicts(profiles[miss["target"]], miss["artifact"],
                                            miss["target"], miss["reason"],
                                            sizes[miss["artifact"]]))
    return verdicts


def gated_verdicts(verdicts, benchmarks: list[dict], gated: set, skipped=()) -> list:
    """Verdicts that decide the exit code: candidates (not the baseline) on gated targets."""
    baselines = {b["artifact"] for b in [*benchmarks, *skipped] if b.get("baseline")}
    return [v for v in verdicts if v.target in gated and v.artifact not in baselines]


def _passed(verdicts, strict: bool) -> bool:
    ok = (PASS,) if strict else (PASS, UNMEASURED, OFF_TARGET)
    return all(v.status in ok for v in verdicts)


def run_pipeline(pipeline: Pipeline, *, force: bool = False, strict: bool = False,
                 quiet: bool = False, config_text: str | None = None) -> Result:
    targets, gated = resolve_targets(pipeline)
    pipeline = apply_target_defaults(pipeline, targets)
    run_dir = pipeline.run_dir
    with Progress(quiet=quiet) as progress:
        ctx = RunContext(pipeline, progress, run_dir, targets=targets)
        progress.note(f"{pipeline.name}: checking the model, data and profiles")
        _preflight(ctx)
        created_run_dir = not run_dir.exists()
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except BaseException:
            close_hosts(ctx.hosts)
            raise
        for stale in run_dir.glob(".*.partial"):  # left by a killed run: never trusted
            shutil.rmtree(stale, ignore_errors=True)
        try:
            artifacts, consumed, bench_stage = _run_stages(ctx, force)
            chosen = bench_stage[1].artifacts if bench_stage else None
            benchmarks, skipped = _benchmark(ctx, bench_stage,
                                             _candidates(artifacts, consumed, chosen))
        except BaseException:  # an error, a bug or Ctrl-C: keep nothing from this run
            _roll_back(ctx, created_run_dir)
            # no report will carry them: what a device kept is said now
            for warning in ctx.cleanup_warnings + close_hosts(ctx.hosts):
                progress.note(f"warning: {warning}")
            raise
        models = model_rows(ctx, artifacts, benchmarks)
        verdicts = _verdicts(benchmarks, skipped, artifacts, ctx)
        passed = _passed(gated_verdicts(verdicts, benchmarks, gated, skipped), strict)
        config_text = config_text or pipeline.model_dump_json()
        manifest = build_manifest(pipeline, hashlib.sha256(config_text.encode()).hexdigest(),
                                  artifacts[0].sha256, targets)
        report = build_report(pipeline, manifest, artifacts, benchmarks, verdicts, models,
                              gated=gated, passed=passed, strict=strict, skipped=skipped,
                              cleanup_warnings=ctx.cleanup_warnings)
        write_reports(run_dir, report)
    return Result(run_dir, artifacts, benchmarks, verdicts, passed, report)
