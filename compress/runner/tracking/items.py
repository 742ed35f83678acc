"""What a run logs to MLflow, read from its report and its run directory: params, metrics,
tags and files. Nothing here is computed beyond unit changes the budgets use too; a
number missing from the report is missing from MLflow. No MLflow import."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

# MLflow's limits (mlflow.utils.validation): longer keys or values are refused whole
MAX_KEY = 250
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
_CUT = " ...[truncated]"
# the characters MLflow takes in a key on every platform
_NOT_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")
REPORT_FILES = ("report.json", "report.md", "report.html")
_LATENCIES = ("p50", "p90", "p99", "mean")
_NUMBERS = ("peak_memory_mb", "model_memory_mb", "energy_mj", "throughput_per_s")


@dataclass(frozen=True)
class RunContent:
    """One MLflow run's worth: name, params, metrics, tags, files (local path, folder in
    the run's artifacts or None for its root) and the status it ends in."""
    name: str
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    files: list[tuple[Path, str | None]] = field(default_factory=list)
    status: str = "FINISHED"


def key(*parts) -> str:
    """An MLflow key from ids joined by dots: other characters become '_', and no path
    segment is empty, '.' or '..' (MLflow refuses a key that normalises to another)."""
    text = _NOT_KEY.sub("_", ".".join(str(p) for p in parts))
    segments = ["_" if s in ("", ".", "..") else s for s in text.split("/")]
    return "/".join(segments)[:MAX_KEY]


def text(value, limit: int) -> str:
    """A param or tag value: strings as they are, the rest as JSON (true, null, [..]),
    cut to MLflow's limit with a visible mark."""
    shown = value if isinstance(value, str) else json.dumps(value, default=str)
    return shown if len(shown) <= limit else shown[:limit - len(_CUT)] + _CUT


def _flatten(settings: dict, prefix: tuple = ()) -> Iterator[tuple[tuple, object]]:
    for name, value in settings.items():
        if isinstance(value, dict) and value:
            yield from _flatten(value, (*prefix, name))
        else:
            yield (*prefix, name), value


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _recorded_stages(report: dict, run_dir: Path) -> list[tuple[str, dict]]:
    """(folder, settings) from the stage.json files of the report's artifacts, for a
    report that does not carry the pipeline's config (the benchmark stage has none)."""
    found, seen = [], set()
    for artifact in report.get("artifacts") or []:
        folder = Path(artifact["path"]).parent
        # 00-: the source and the baselines, which no stage of the pipeline made
        if folder in seen or folder.name.startswith("00-"):
            continue
        seen.add(folder)
        stage = _read_json(Path(run_dir) / folder / "stage.json") or {}
        found.append((".".join(folder.parts), stage.get("config") or {}))
    return found


def stage_params(report: dict, run_dir: Path) -> dict[str, str]:
    """Each stage's settings under its folder's name, e.g. `stages.02-quantize.calibration`
    (from the report's pipeline config, else the stage.json files), and the seed."""
    config = (report.get("pipeline") or {}).get("config") or {}
    if config.get("stages"):
        stages = [(f"{index:02d}-{stage.get('name') or stage['type']}", stage)
                  for index, stage in enumerate(config["stages"], 1)]
    else:
        stages = _recorded_stages(report, run_dir)
    params = {}
    for folder, settings in stages:
        for names, value in _flatten(settings):
            if names[0] in ("name", "input") and value is None:
                continue  # the name is in the key; no input means the stage before
            params[key("stages", folder, *names)] = text(value, MAX_PARAM_VALUE)
    seed = config.get("seed", (report.get("manifest") or {}).get("seed"))
    if seed is not None:
        params["seed"] = str(seed)
    return params


def choice_params(choices: dict) -> dict[str, str]:
    """A search trial's choices, `<stage>.<option>` as the search space names them."""
    return {key(name): text(value, MAX_PARAM_VALUE) for name, value in choices.items()}


def _numbers(found: dict) -> dict[str, float]:
    return {name: float(value) for name, value in found.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value)}


def bench_numbers(bench: dict) -> dict[str, float]:
    """The numbers one benchmark row holds, under the names the budgets use."""
    latency = bench.get("latency_ms") or {}
    found = {f"latency_{p}_ms": latency.get(p) for p in _LATENCIES}
    found.update({name: bench.get(name) for name in _NUMBERS})
    if bench.get("size_bytes") is not None:  # MiB, as profiles.check counts model_size_mb
        found["model_size_mb"] = bench["size_bytes"] / 2**20
    metric = bench.get("metric") or {}
    if metric.get("name"):
        found[metric["name"]] = metric.get("value")
        found[f"{metric['name']}_drop"] = metric.get("drop")
    return _numbers(found)


def metrics(report: dict) -> dict[str, float]:
    """`<target>.<artifact>.<number>` for every benchmark row of the report."""
    return {key(bench["target"], bench["artifact"], name): value
            for bench in report.get("benchmarks") or []
            for name, value in bench_numbers(bench).items()}


def recommendation_tags(report: dict) -> dict[str, str]:
    tags = {}
    for rec in report.get("recommendations") or []:
        tags[key("recommend", rec["target"])] = f"{rec.get('artifact') or 'none'} ({rec['status']})"
    return tags


def tags(report: dict) -> dict[str, str]:
    """Verdicts (`verdict.<target>.<artifact>.<budget>` = pass, fail, unmeasured,
    off-target) and the summary tags."""
    found = {key("verdict", v["target"], v["artifact"], v["metric"]): v["status"]
             for v in report.get("verdicts") or []}
    return {**{name: text(value, MAX_TAG_VALUE) for name, value in found.items()},
            **summary_tags(report)}


def summary_tags(report: dict) -> dict[str, str]:
    """Whether the run passed, the recommendation per target and the config's digest."""
    found = {}
    if "passed" in report:
        found["passed"] = "true" if report["passed"] else "false"
    found.update(recommendation_tags(report))
    digest = (report.get("pipeline") or {}).get("config_sha256")
    if digest:
        found["config_sha256"] = digest
    return {name: text(value, MAX_TAG_VALUE) for name, value in found.items()}


def recommendation_metrics(report: dict) -> dict[str, float]:
    """`recommended.<target>.<number>`: what each target's recommendation reports."""
    found = {}
    for rec in report.get("recommendations") or []:
        metric = rec.get("metric") or {}
        numbers = {name: rec.get(name) for name in ("latency_p90_ms", "peak_memory_mb",
                                                    "model_size_mb")}
        if metric.get("name"):
            numbers[metric["name"]] = metric.get("value")
            numbers[f"{metric['name']}_drop"] = rec.get("drop")
        found.update({key("recommended", rec["target"], name): value
                      for name, value in _numbers(numbers).items()})
    return found


def recommended_files(report: dict, run_dir: Path) -> list[tuple[Path, str]]:
    """Each recommended model file, with the files beside it that share its stem (an
    ONNX model's external weights, an OpenVINO model's .bin), as (path, folder to log
    it under: recommended/<target>)."""
    found = []
    for rec in report.get("recommendations") or []:
        if not rec.get("path"):
            continue
        path = Path(rec["path"])
        path = path if path.is_absolute() else Path(run_dir) / path
        if not path.is_file():
            continue
        stem = path.name.split(".")[0]
        found += [(f, f"recommended/{key(rec['target'])}") for f in sorted(path.parent.iterdir())
                  if f.is_file() and f.name.split(".")[0] == stem]
    return found


def report_files(run_dir: Path) -> list[tuple[Path, None]]:
    return [(Path(run_dir) / name, None) for name in REPORT_FILES
            if (Path(run_dir) / name).is_file()]


def run_content(report: dict, run_dir: Path, name: str, choices: dict | None = None,
                extra_tags: dict | None = None) -> RunContent:
    """A pipeline run (or one search trial): its stages' settings and the trial's
    choices, its measurements, verdicts and recommendations, its reports and the
    recommended files."""
    return RunContent(name, {**stage_params(report, run_dir), **choice_params(choices or {})},
                      metrics(report), {**tags(report), **(extra_tags or {})},
                      report_files(run_dir) + recommended_files(report, run_dir))
