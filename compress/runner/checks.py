"""Everything checked before any work starts, so bad input fails before a file is written:
the target profiles, the model (its inputs declared or read from the file, and that it
runs), the data against those inputs, the data each stage needs, meters and Pythons."""
from __future__ import annotations

import os

from compress.config.data import DATA_ROLES
from compress.errors import ConfigError, DataError, ModelError
from compress.runner.tracking.mlflow import check_pipeline as check_tracking
from profiles.validation import field_of


def resolve_inputs(pipeline):
    """The pipeline with model.inputs as the model takes them: declared (and checked
    against the file), or read from an ONNX or TFLite file."""
    from compress.model.inputs import onnx_inputs, reconcile, tflite_inputs
    from compress.model.source import check_tflite_file, onnx_graph
    model = pipeline.model
    if model.format == "onnx":
        what = pipeline.resolve(model.onnx).name if isinstance(model.onnx, str) else "the ONNX model"
        decls = reconcile(model.inputs, onnx_inputs(onnx_graph(pipeline)), what)
    elif model.format == "tflite":
        path = pipeline.resolve(model.tflite)
        check_tflite_file(path)
        decls = reconcile(model.inputs, tflite_inputs(path), path.name, real_for_quantized=True)
    else:
        return pipeline
    return pipeline.model_copy(update={"model": model.model_copy(update={"inputs": decls})})


def accelerators_here(profile) -> bool:
    """Whether this machine has the profile's execution providers (its delegate is tried
    by the runner, which says 'unmeasured' when it cannot load it)."""
    if not profile.runtime.providers:
        return True
    import onnxruntime
    available = set(onnxruntime.get_available_providers())
    return all(p.name in available for p in profile.runtime.providers)


def check_target_pythons(pipeline) -> None:
    """A local target's own Python is an executable file (it is not run: `validate`)."""
    for index, target in enumerate(pipeline.targets):
        if target.python and not target.remote:
            path = pipeline.resolve(target.python)
            if not os.access(path, os.X_OK) or path.is_dir():
                raise ConfigError(f"python '{target.python}' is not an executable Python here "
                                  "(a local target's `python:` runs its benchmark; give the "
                                  "full path of that environment's python)",
                                  field=field_of(("targets", index)))


def _check_local_pythons(ctx) -> None:
    """A local target's own Python must exist and run the runner before any work starts."""
    check_target_pythons(ctx.pipeline)
    for index, target in enumerate(ctx.pipeline.targets):
        if target.python and not target.remote:
            _probe_runner(ctx.pipeline.resolve(target.python), target.python, index)


def _probe_runner(python, named: str, index: int) -> None:
    """That Python can import the runner (numpy and all): a system python3 often cannot,
    and would fail only after every stage before the benchmark has run."""
    import subprocess
    from compress.measure.client import runner_env
    try:
        done = subprocess.run([str(python), "-c", "import runtimes.bench"], env=runner_env(),
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        failed = str(exc)
    else:
        failed = None if done.returncode == 0 else \
            ((done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1])
    if failed:
        raise ConfigError(f"python '{named}' cannot run the benchmark runner ({failed[:300]}). "
                          "Install its packages in that environment: pip install -c "
                          "constraints.txt 'edge-compress[device]' (or numpy and onnxruntime)",
                          field=field_of(("targets", index)))


def _check_meters(ctx) -> None:
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
        if target.remote or target.python or power.meter in ("auto", "none"):
            continue  # another Python's runner checks its own meter
        if not accelerators_here(profile):
            continue  # an accelerator not here is 'unmeasured' anyway: its meter is moot
        try:
            detect(power.meter, rail=power.rail, command=power.command,
                   interval_ms=power.interval_ms, root=sysfs_root())
        except RuntimeInputError as exc:
            raise ConfigError(f"profile {name}: {exc}",
                              field=field_of(("targets", index))) from None


def _check_data(ctx) -> None:
    from compress.model.inputs import unfixed_dims
    for role in DATA_ROLES:
        ctx.dataset(role)
    for index, stage in enumerate(ctx.pipeline.stages, start=1):
        for role in stage.required_data():
            kind = next((getattr(stage, key) for key in ("scheme", "method", "mode")
                         if getattr(stage, key, None)), None)
            preset = getattr(stage, "preset", None)
            if preset and preset != "none":  # the preset may be what asked for int8
                kind = f"{kind}, preset {preset}" if kind else f"preset {preset}"
            ctx.require_dataset(role, f"stage {index} ({stage.type}{', ' + kind if kind else ''})")
    evaluation = ctx.dataset("evaluation")
    if evaluation is not None and ctx.metric().type == "accuracy" \
            and evaluation.class_labels() is None:
        raise DataError("data.metric is accuracy but data.evaluation has no labels (an integer "
                        "class per sample); return labels with the inputs, or use `metric: "
                        "{type: fidelity}` or a custom metric")
    given = any(ctx.dataset(role) is not None for role in ("calibration", "evaluation"))
    unfixed_dims(ctx.inputs, given)


def check_model_runs(ctx) -> None:
    """The model as given runs one call, before any work: a torch module with the first
    feed, an ONNX or TFLite file on the engine that will measure it."""
    feed = ctx.sample_feeds(1)[0][0]
    model = ctx.pipeline.model
    if model.format == "torch":
        from compress.model.source import build_torch_model, check_torch_inputs
        ctx.source_model = build_torch_model(ctx.pipeline)
        check_torch_inputs(ctx.source_model, ctx.inputs, feed)
    elif model.format == "onnx":
        from compress.model.onnx_errors import check_runs
        if isinstance(model.onnx, str):
            check_runs(ctx.pipeline.resolve(model.onnx), [feed], "the ONNX model as given")
            return
        import tempfile
        from pathlib import Path
        with tempfile.TemporaryDirectory() as scratch:  # a ModelProto given from Python
            path = Path(scratch) / "model.onnx"
            path.write_bytes(model.onnx.SerializeToString())
            check_runs(path, [feed], "the ONNX model as given")
    elif model.format == "tflite":
        from compress.model.run import run_feeds
        from runtimes.errors import RuntimeInputError
        try:
            run_feeds(ctx.pipeline.resolve(model.tflite), ctx.inputs, [feed])
        except (RuntimeInputError, ValueError, RuntimeError) as exc:
            raise ModelError(f"model.tflite: LiteRT cannot run one call of it: {exc}") from None


def _exists(path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name longer than the file system takes: reported below
        return False


def check_run_dir(pipeline) -> None:
    """The run directory can be made (or is a folder) and written, before any work."""
    run_dir = pipeline.run_dir
    where = f"output '{pipeline.output}' with name '{pipeline.name}' ({run_dir})"
    existing = next(p for p in (run_dir, *run_dir.parents) if _exists(p))
    if not existing.is_dir():
        raise ConfigError(f"{where}: {existing} is a file, not a folder; choose another "
                          "`output:` folder", field="output")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}: {existing} is not writable by this user; choose another "
                          "`output:` folder", field="output")
    limit = os.pathconf(existing, "PC_NAME_MAX")
    for part in run_dir.relative_to(existing).parts:
        if len(part.encode()) > limit:
            raise ConfigError(f"{where}: '{part[:40]}...' is longer than this file system "
                              f"allows in a name ({limit} bytes)", field="output")


def _check_class_labels(dataset, outputs) -> None:
    """For accuracy: one whole-number class per row of the model's first output (per
    feed), within its classes."""
    import numpy as np
    for index, (label, first) in enumerate(zip(dataset.labels, (o[0] for o in outputs))):
        label, first = np.asarray(label), np.asarray(first)
        rows = first.shape[0] if first.ndim >= 2 else 1
        if label.dtype.kind == "f" and not (np.mod(label, 1) == 0).all():
            raise DataError(f"data.evaluation, feed {index}: labels hold fractions "
                            f"({label.reshape(-1)[:4].tolist()}...); accuracy compares one "
                            "whole-number class per sample (or use fidelity or a custom metric)")
        if label.size != rows:
            raise DataError(f"data.evaluation, feed {index}: labels of shape {list(label.shape)} "
                            f"for {rows} row(s) of the model's first output (shape "
                            f"{list(first.shape)}): accuracy takes one class label per row")
    labels = dataset.class_labels()
    classes = int(np.prod(np.shape(outputs[0][0])[1:])) if np.ndim(outputs[0][0]) else 1
    if labels.min() < 0 or labels.max() >= classes:
        raise DataError(f"data.evaluation: labels run from {labels.min()} to "
                        f"{labels.max()}, but the model's first output has {classes} "
                        f"classes (0..{classes - 1}): fix the labels, or use another "
                        "metric (fidelity, custom)")


def _check_reference(ctx) -> None:
    """The model as given, on every evaluation feed: finite outputs, labels within its
    classes, and a custom metric that scores it (all before any work)."""
    import numpy as np
    outputs = ctx.reference_outputs()
    for index, feed in enumerate(outputs):
        for name, value in zip(ctx.reference_names(), feed):
            if np.asarray(value).dtype.kind == "f" and not np.isfinite(value).all():
                raise ModelError(f"the model as given outputs NaN or infinity on evaluation "
                                 f"feed {index} (output '{name}'): its inputs are not what it "
                                 "expects (scale, layout, dtype?) or the model is broken; "
                                 "nothing can be compared with that")
    metric = ctx.metric()
    if metric.type == "accuracy":
        _check_class_labels(ctx.dataset("evaluation"), outputs)
    if metric.type == "custom":
        ctx.metric_baseline()  # the user's function, tried on the source model first


def _check_language_model(ctx) -> None:
    """A causal LM before any work: a model the pipeline starts from, text it can read."""
    from compress.model.language import check_given
    check_given(ctx.pipeline, objects=True)
    ctx.text()   # read once, here: a missing file or a failing loader stops the run now


def preflight(ctx) -> None:
    check_run_dir(ctx.pipeline)
    check_tracking(ctx.pipeline)
    if ctx.pipeline.model.language:
        _check_language_model(ctx)
    else:
        _check_data(ctx)
    _check_meters(ctx)
    _check_local_pythons(ctx)
    if not ctx.pipeline.model.language:
        check_model_runs(ctx)
    if ctx.dataset("evaluation") is not None:
        _check_reference(ctx)
    if ctx.compress_only:   # a Ray task: the devices are the driver's to reach
        return
    from compress.measure.fleet import open_fleets
    ctx.fleets = open_fleets(ctx)  # devices last: local mistakes never touch the network
