"""`compress run | validate | schema | profiles | preflight`.

Exit codes (EXIT_CODES, also in `compress --help`): 0 every gated budget holds (preflight:
every op runs on the accelerator); 1 a budget is missed (preflight: some ops would fall
back); 2 bad input (one clear message, no traceback); 3 an internal error, a bug (one
line, the traceback in a crash log); 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys

from compress.errors import CompressError, ConfigError, NoSpace
from runtimes.safe_text import safe_text


EXIT_CODES = """exit codes:
  0    every gated budget holds (preflight: every op runs on the accelerator)
  1    a budget is missed (preflight: some ops would fall back); nothing else exits 1
  2    bad input: one message naming the problem and the fix, no traceback
  3    an internal error (a bug): one line, the traceback in a crash log in the run
       directory (else the temporary folder)
  130  interrupted (Ctrl-C): finished stages are kept
  141  the output's reader went away (e.g. `compress runs | head`)"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compress", description="Compress, export, benchmark and budget-check a model "
        "for edge devices.", epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    from compress.runner.manifest import product_version   # installed, else pyproject's
    parser.add_argument("--version", action="version", version=f"%(prog)s {product_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a pipeline.yaml")
    run.add_argument("file")
    run.add_argument("--json", action="store_true", help="print the outcome as one JSON "
                     "document on stdout (passed, exit code, run folder, what to ship per "
                     "target, the verdicts counted); every other line goes to stderr")
    run.add_argument("--force", action="store_true", help="redo stages even if cached")
    run.add_argument("--strict", action="store_true",
                     help="pass only when every gated target has a shippable variant (met "
                     "every budget measured on the device); a candidate, measured off the "
                     "device or with a budget unmeasured, does not count")
    run.add_argument("--quiet", action="store_true", help="no progress display")
    run.add_argument("--name", help="name of the run (its folder under the output folder); "
                     "default: the pipeline's `name`")
    run.add_argument("--output", help="parent folder of the run folder (relative to here); "
                     "default: the pipeline's `output`")
    run.add_argument("--executor", choices=("local", "ray"),
                     help="where a search's trials compress (default: the pipeline's "
                     "`executor`, else local); ray: a Ray cluster (executor.address, else "
                     "RAY_ADDRESS, else one started here)")
    runs = sub.add_parser("runs", help="list the finished runs under an output folder")
    runs.add_argument("--output", default="runs", help="the output folder (default: runs)")
    runs.add_argument("--all", action="store_true", help="earlier runs of each name too")
    runs.add_argument("--json", action="store_true")
    compare = sub.add_parser("compare", help="what changed between two runs: settings, "
                             "versions, numbers, verdicts, recommendations")
    compare.add_argument("a", help="a run name under --output (its latest run), name~N (its "
                         "N-th newest, see `compress runs --all`), a run folder or a report.json")
    compare.add_argument("b")
    compare.add_argument("--output", default="runs", help="the output folder (default: runs)")
    from compress.runner.ship import add_parser as add_ship
    add_ship(sub)
    validate = sub.add_parser("validate", help="check a pipeline.yaml, the files and the "
                              "code it names (found and read, never run), and exit")
    validate.add_argument("file")
    sub.add_parser("schema", help="print the pipeline JSON Schema")
    profiles = sub.add_parser("profiles", help="list the device profiles")
    profiles.add_argument("--json", action="store_true")
    preflight = sub.add_parser("preflight", help="list the ops of a model the profile's "
                               "accelerator would not run (exit 1 if any), before any benchmark")
    preflight.add_argument("model", help=".onnx or .tflite model")
    preflight.add_argument("--profile", required=True, help="profile name or YAML path")
    preflight.add_argument("--python", help="measure the placement with this Python's "
                           "runtimes (an environment whose onnxruntime has the provider, e.g. "
                           ".venv-qnn/bin/python) instead of this one's")
    preflight.add_argument("--json", action="store_true")
    return parser


def _run(args):
    """The run, its lines for a person printed; compress.run's Result."""
    from compress.api import run
    result = run(args.file, force=args.force, strict=args.strict, quiet=args.quiet,
                 name=args.name, output=args.output, executor=args.executor)
    _print_summary(result)
    return result


def _cmd_run(args) -> int:
    if args.json:   # one JSON document on stdout, every line for a person on stderr
        from compress.runner.summary import run_as_json
        return run_as_json(lambda: _run(args))
    return _run(args).exit_code


def _say(line: str, file=None) -> None:
    """One line of output (stdout; `file`: another stream). Its fields come from outside
    (a profile's arch, a model's names, a report read back, a path): nothing in them may
    drive the terminal, start a line of its own or show a URL's password."""
    print(safe_text(line, multiline=False), file=file)


def _print_summary(result) -> None:
    """What a run ends with: misses, what was not measured, one line per target, the
    verdict (compress.report.terminal)."""
    from compress.report.terminal import closing_lines
    for line in closing_lines(result.report, result.passed,
                              str(result.run_dir.resolve() / "report.md")):
        _say(line)


def _cmd_validate(args) -> int:
    from compress.config.pipeline import load_pipeline
    from compress.runner.checks import check_tracking, resolve_inputs
    from compress.runner.targets import apply_target_defaults, resolve_targets
    from compress.runner.static_checks import check_without_running
    pipeline = load_pipeline(args.file)
    targets = resolve_targets(pipeline)
    resolve_inputs(apply_target_defaults(pipeline, targets.pairs))
    # the tracking URI as `run` checks it before any work (no connection, nothing made):
    # a pipeline `validate` passes must not stop on it at the start of a run
    check_tracking(pipeline)
    searched = ""
    if pipeline.search is not None:
        from compress.search.space import axes, size
        count = size(axes(pipeline, targets))
        searched = (f", searching {count} combination{'s' if count > 1 else ''} of "
                    f"{', '.join(pipeline.search.space)}")
    check_without_running(pipeline)   # its code found and read, never imported or run
    stages, targets = len(pipeline.stages), len(pipeline.targets)
    _say(f"{args.file}: valid pipeline '{pipeline.name}' with {stages} stage"
         f"{'s' if stages != 1 else ''} and {targets} target{'s' if targets != 1 else ''}"
         f"{searched}")
    return 0


def _cmd_schema(args) -> int:
    from compress.config.pipeline import Pipeline
    print(json.dumps(Pipeline.model_json_schema(), indent=2))
    return 0


def _cmd_profiles(args) -> int:
    from profiles import list_profiles
    found = list_profiles()
    if args.json:
        print(json.dumps([p.model_dump() for p in found], indent=2))
        return 0
    for p in found:
        budget = ", ".join(f"{k}={v:g}" for k, v in p.budget.model_dump().items() if v is not None)
        runtime = p.runtime
        engines = runtime.listed() + (f" (threads {runtime.threads})" if runtime.threads else "")
        if runtime.runs("litert"):
            engines += f"; LiteRT {'XNNPACK' if runtime.xnnpack else 'built-in kernels'}"
            engines += f", delegate {runtime.delegate}" if runtime.delegate else ""
            engines += (f", weight cache in {runtime.xnnpack_weight_cache}"
                        if runtime.xnnpack_weight_cache else "")
            engines += f", TFLite mode {p.export.tflite_mode}" if p.export.tflite_mode else ""
        _say(f"{p.name:<18} {p.device.arch:<8} {p.description}")
        _say(f"{'':<18} engines: {engines}")
        _say(f"{'':<18} budget: {budget}")
        lm = ", ".join(f"{k}={v:g}" for k, v in p.language_model.limits().items() if v is not None)
        if lm:
            _say(f"{'':<18} language model: {lm} (prompt {p.language_model.prompt_tokens}, "
                 f"context {p.language_model.context_tokens} tokens)")
    return 0


def _cmd_preflight(args) -> int:
    from compress.measure.preflight import preflight, render
    report = preflight(args.model, args.profile, python=args.python)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return report["exit_code"]


def _cmd_runs(args) -> int:
    from pathlib import Path
    from compress.runner.history import list_runs
    output = Path(args.output)
    try:
        folder = output.is_dir()
    except OSError:   # it cannot be looked at: list_runs says why
        folder = True
    if not folder:   # missing, or a file: said as every other bad input is
        what = "is not a folder" if output.exists() else "does not exist"
        raise ConfigError(f"no runs: {output} {what} (give the pipeline's output folder "
                          "with --output)")
    skipped: list = []
    found = list_runs(output, with_history=args.all, skipped=skipped)
    for path, why in skipped:   # a report.json no run wrote: named, and left out
        _say(f"skipped {path}: {why}", file=sys.stderr)
    if args.json:
        print(json.dumps([{**e.__dict__, "folder": str(e.folder)} for e in found], indent=2))
        return 0
    for entry in found:
        _say(f"{entry.name:<28} {entry.created:<25} {'PASSED' if entry.passed else 'FAILED'}  "
             f"config {entry.config_sha256[:8]}  {entry.folder}")
        for line in entry.recommendations if entry.latest else ():
            _say(f"{'':<4}{line}")
    return 0


def _cmd_compare(args) -> int:
    from pathlib import Path
    from compress.runner.compare import compare
    from compress.runner.history import load_report, resolve
    reports = [resolve(ref, Path(args.output)) for ref in (args.a, args.b)]
    loaded = [load_report(path) for path in reports]
    _say(f"A: {reports[0]}")
    _say(f"B: {reports[1]}")
    print("\n".join(compare(*loaded)))   # each line made safe by compare()
    return 0


def _cmd_ship(args) -> int:
    from compress.runner.ship import command
    return command(args, _say)


COMMANDS = {"run": _cmd_run, "runs": _cmd_runs, "compare": _cmd_compare, "ship": _cmd_ship, "validate": _cmd_validate, "schema": _cmd_schema,
            "profiles": _cmd_profiles, "preflight": _cmd_preflight}


# Installed by the `pipeline` extra; a device install (`[device]`) has only the runtimes.
PIPELINE_PACKAGES = {"pydantic", "yaml", "rich", "torch", "onnx", "onnxscript", "torch_pruning"}


def _dispatch(args) -> int:
    try:
        return COMMANDS[args.command](args)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in PIPELINE_PACKAGES:
            raise
        print(f"error: `compress {args.command}` needs the package '{exc.name}', which comes "
              "with the pipeline extra: pip install -c constraints.txt "
              "\"edge-compress[pipeline]\" (this looks like a device install, which has only "
              "`python -m runtimes bench`)", file=sys.stderr)
        return 2
    except Exception as exc:
        # a full disk (ENOSPC, EDQUOT; also as a library's error about a file cut short)
        # is the user's to fix, as bad input is; anything else is a bug
        said = NoSpace.found_in(exc) or (exc if isinstance(exc, CompressError) else None)
        if said is None:
            raise
        print(f"error: {said}", file=sys.stderr)   # made safe by CompressError itself
        return said.exit_code


def _safe_library_warnings() -> None:
    """A library's warnings (Python's `warnings`, a log line with no handler of its own)
    quote what they were given: a module's name, a path, a URI. They pass the one
    sanitizer the CLI's own lines pass."""
    import warnings
    if not getattr(warnings.formatwarning, "safe_text", False):
        plain = warnings.formatwarning
        warnings.formatwarning = lambda *a, **k: safe_text(plain(*a, **k))
        warnings.formatwarning.safe_text = True
    if logging.lastResort is not None:
        logging.lastResort.setFormatter(_SafeFormatter())


class _SafeFormatter(logging.Formatter):
    def format(self, record) -> str:
        return safe_text(super().format(record))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _safe_library_warnings()
    try:
        return _dispatch(args)
    except BrokenPipeError:   # `| head` read what it wanted: no traceback, no more output
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("interrupted: finished stages are kept; the stage that was running is discarded",
              file=sys.stderr)
        return 130
    except (Exception, SystemExit) as exc:  # a bug: never exit 1, which means "over budget"
        from compress.runner import crash
        return crash.report(exc)
