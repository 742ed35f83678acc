"""`compress preflight MODEL --profile P`: which ops of a model the profile's accelerator
would not run, before any benchmark.

The accelerator is the one the profile runs models on: its first onnxruntime execution
provider with an op table (runtime.providers), or its LiteRT delegate (runtime.delegate);
a profile that names neither is checked against its export preset's accelerator, if that
has a table. Every node of the model is set against the table (export.op_support); where
the provider is installed on this machine the placement onnxruntime or LiteRT really
makes is shown beside it (runtimes.placement).

Exit codes: 0 every op runs on the accelerator (or the profile has none: everything runs
on the CPU), 1 some ops would fall back, 2 bad input (model, profile, or a model format
the profile does not run).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from compress.errors import ConfigError, MissingDependency, ModelError
from compress.measure.client import engine_flags, engine_for, required_engine
from export.op_support import ModelUnreadable, check, list_ops
from export.op_tables import PRESET_TABLES, TABLES, OpTable, table_for
from runtimes import engines, formats
from runtimes.litert_compiled import GPU_DELEGATE
from runtimes.safe_text import safe_text

# Checked on ai-edge-litert 2.3: its analyzer (_pywrap_analyzer_wrapper, gpu_compatibility)
# calls every model compatible, one of RFFT2D and COMPLEX_ABS included, so it is no check.
GPU_NO_TABLE = ("LiteRT's GPU accelerator has no op table here: the GPU compatibility "
                "check shipped with ai-edge-litert passes every model, so it is not used. "
                "Compiling the model on a machine with a GPU tells whether the GPU takes "
                "all of it (the measured placement below, and every benchmark's)")


@dataclass
class Target:
    """What a profile runs a model on."""
    engine: str
    table: OpTable | None
    settings: engines.Settings           # the profile's, as its benchmarks open sessions
    accelerators: tuple                  # (name, options) the engine hands nodes to, in order
    fallback_to: str                     # where ops the accelerator does not take run
    accelerated_by: str | None           # the provider or delegate the table is for
    note: str | None = None


def _target(profile, fmt: str) -> Target:
    runtime = profile.runtime
    engine = engine_for(runtime, fmt)
    if engine is None:  # never with auto: some engine runs every format the pipeline makes
        wanted = " or ".join(sorted({s for e in runtime.engines if e in engines.names()
                                      for s in engines.get(e).suffixes}))
        raise ModelError(f"profile '{profile.name}' runs {runtime.listed()} only "
                         f"(runtime.engines): give it a {wanted} model")
    engine = required_engine(engine, fmt)   # auto: the accelerator of the format's default
    settings = runtime.settings(runtime.threads)
    accelerators = engines.get(engine).accelerators(settings)
    target = Target(engine, None, settings, accelerators, "CPU", None)
    for index, (name, options) in enumerate(accelerators):
        table = table_for(name, options)
        if table is not None:
            later = [n for n, _ in accelerators[index + 1:]]
            target.table, target.accelerated_by = table, name
            target.fallback_to = " or ".join([*later, "CPU"])
            return target
    if accelerators:
        target.accelerated_by = accelerators[0][0]
        target.note = GPU_NO_TABLE if target.accelerated_by == GPU_DELEGATE else None
        return target
    preset = profile.export.preset
    table = TABLES.get(PRESET_TABLES.get(preset or ""))
    if table is not None and table.format == fmt:
        target.table = table
        target.note = (f"the profile configures no provider or delegate, so its benchmarks "
                       f"run on the CPU; checked against its export preset '{preset}' "
                       f"({table.accelerator})")
    return target


def _runner_flags(target: Target) -> list[str]:
    """The runner's options for the placement `target` makes."""
    threads = target.settings.threads
    flags = ["--threads", str(threads)] if threads else []
    fmt = formats.run_by(target.engine)[0]
    return flags + engine_flags(target.engine, target.settings, fmt)


def _measured_in(python: str, path: str, target: Target) -> tuple[dict | None, str | None]:
    """The placement the runner makes in another environment (one whose onnxruntime has
    the provider: onnxruntime-openvino, onnxruntime-qnn), from one run of the runner."""
    from compress.measure.client import Unavailable, measure_in_subprocess
    cmd = [python, "-m", "runtimes", "bench", os.path.abspath(path), "--runs", "1",
           "--warmup", "0", "--meter", "none", "--placement", "--json",
           *_runner_flags(target)]
    try:
        return measure_in_subprocess(cmd, 600, lambda **_: None)["placement"], None
    except OSError as exc:
        raise ConfigError(f"--python {python}: cannot run it ({exc.strerror}); give the "
                          "python of an environment with this project's runtimes") from None
    except Unavailable as exc:
        return None, f"not available in {python}: {exc}"
    except RuntimeError as exc:
        return None, f"the runner in {python} failed: {str(exc).strip().splitlines()[-1]}"


def _measured(path: str, target: Target) -> tuple[dict | None, str | None]:
    """The placement the runtime really makes here, or why there is none."""
    from runtimes.errors import ProviderUnavailable, RuntimeInputError
    try:
        return engines.get(target.engine).placement(path, target.settings, {}), None
    except ProviderUnavailable as exc:
        return None, f"not available here: {exc}"
    except (RuntimeInputError, ImportError) as exc:
        return None, f"failed: {exc}"


def _rows(support, target: Target) -> list[dict]:
    groups: dict[tuple, list] = {}
    for c in support.checks:
        groups.setdefault((c.node.op, c.supported, c.on_accelerator, c.reason), []).append(c)
    rows = []
    for (op, supported, on_acc, reason), checks in groups.items():
        rows.append({"op": op, "count": len(checks), "supported": supported,
                     "runs_on": support.table.accelerator if on_acc else target.fallback_to,
                     "reason": reason, "note": checks[0].note,
                     "nodes": [c.node.name for c in checks]})
    return rows


def _read(model: str, profile_name: str):
    """(the profile, the model's ops), or the error that says why not."""
    from profiles import ProfileError, load_profile
    try:
        profile = load_profile(profile_name)
    except ProfileError as exc:
        raise ConfigError(str(exc)) from None
    try:
        return profile, list_ops(model, _onnx_header(model))
    except ModelUnreadable as exc:
        raise ModelError(str(exc)) from None
    except ImportError:
        raise MissingDependency("ai_edge_litert", "ai-edge-litert",
                                "Reading the ops of a TFLite model") from None


def _onnx_header(model: str):
    """An .onnx file's graph without its weights' data, its external data checked; None
    for any other file. Read by walking the protobuf (compress.model.onnx_file): a file
    that is not ONNX is refused at its first bad byte, never read whole into memory."""
    if not (model.lower().endswith(".onnx") and os.path.isfile(model)):
        return None   # list_ops names a missing file or another kind
    from compress.model.onnx_compat import read_graph
    return read_graph(model).model


def _no_table_verdict(profile, target) -> str:
    if target.accelerated_by:
        return (f"no op table for {target.accelerated_by}: nodes it does not take run on "
                "the CPU")
    accelerator = profile.device.accelerator
    return "everything runs on the CPU (" + (
        f"{profile.name} configures no provider or delegate for its {accelerator})"
        if accelerator else f"{profile.name} has no accelerator)")


def _checked(report: dict, ops, target) -> None:
    """The report with the op table's answer: the ops, what falls back, the verdict."""
    support = check(ops, target.table)
    fallback = support.fallback()
    n = len(support.checks)
    report.update(accelerator=target.table.accelerator, table=target.table.name,
                  source=target.table.source, nodes=n, ops=_rows(support, target),
                  fallback=fallback, warnings=support.warnings,
                  removed_before_placement=support.removed)
    if target.table is TABLES["edgetpu"] and not any(
            node.op == "edgetpu-custom-op" for node in ops.nodes):
        report["notes"].append("not compiled for the Edge TPU yet: this is what the Edge "
                               "TPU compiler would map (edgetpu_compiler)")
    if fallback["nodes"] == 0:
        report["verdict"] = f"all {n} ops on {target.table.the}"
    else:
        share = fallback["flops_share"]
        to = "the CPU" if target.fallback_to == "CPU" else target.fallback_to
        report["verdict"] = (
            f"{fallback['nodes']} of {n} ops ({', '.join(fallback['op_types'])}) would "
            f"fall back to {to}"
            + (f", ~{share:.1%} of FLOPs (estimate)" if share is not None else ""))


def _with_placement(report: dict) -> None:
    """The verdict and exit code with what the placement measured here adds."""
    measured = (report["placement"] or {}).get("fallback") or {}
    if measured.get("nodes"):
        report["verdict"] += (f"; measured here, {measured['nodes']} node(s) ran elsewhere "
                              f"({', '.join(measured['op_types'])})")
    split = (report["placement"] or {}).get("fully_accelerated") is False
    if split:
        report["verdict"] += "; measured here, some nodes ran on the CPU (LiteRT says not which)"
    unsupported = ((report["fallback"] or {}).get("nodes", 0) + measured.get("nodes", 0)
                   + split)
    report["exit_code"] = 1 if unsupported else 0


def preflight(model: str, profile_name: str, measure: bool = True,
              python: str | None = None) -> dict:
    """The preflight report of `model` for the profile `profile_name` (name or path).
    `python`: measure the placement with that environment's runtimes instead of this
    one's (the provider lives there)."""
    profile, ops = _read(model, profile_name)
    target = _target(profile, ops.format)
    report = {"model": model, "format": ops.format, "profile": profile.name,
              "accelerator": None, "table": None, "source": None,
              "nodes": len(ops.nodes), "ops": [], "fallback": None, "warnings": [],
              "notes": [target.note] if target.note else [], "placement": None,
              "placement_note": None}
    if target.table is None:
        report["verdict"] = _no_table_verdict(profile, target)
        if not target.accelerated_by:
            report["exit_code"] = 0
            return report
    else:
        _checked(report, ops, target)
    if measure and target.accelerators:
        report["placement"], report["placement_note"] = (
            _measured_in(python, model, target) if python else _measured(model, target))
    _with_placement(report)
    return report


def render(report: dict) -> str:
    """The report as a table and a verdict line, safe to print."""
    head = f"{report['model']} ({report['format']}) for {report['profile']}"
    if report["accelerator"]:
        head += f": {report['accelerator']}, op table '{report['table']}' ({report['source']})"
    lines = [head]
    if report["ops"]:
        lines.append(f"{'op type':<26} {'count':>5}  {'supported':<9}  {'would run on':<22} note")
        for row in report["ops"]:
            note = row["reason"] or row["note"]
            lines.append(f"{row['op']:<26} {row['count']:>5}  "
                         f"{'yes' if row['supported'] else 'no':<9}  {row['runs_on']:<22} {note}")
    if report.get("removed_before_placement"):
        lines.append(f"({report['removed_before_placement']} Constant/Identity/Dropout nodes "
                     "are removed by onnxruntime before placement and not counted)")
    lines += [f"warning: {w}" for w in report["warnings"]]
    lines += [f"note: {n}" for n in report["notes"]]
    if report["placement"]:
        from runtimes.placement import describe
        lines.append(f"measured here: {describe(report['placement'])}")
    elif report["placement_note"]:
        lines.append(f"measured placement: none, {report['placement_note']}")
    lines.append(f"verdict: {report['verdict']}")
    # op types, node names and the model's path are the model's own text
    return "\n".join(safe_text(line, multiline=False) for line in lines)
