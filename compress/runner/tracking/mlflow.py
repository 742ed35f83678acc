"""MLflow tracking, the `tracking: {mlflow: {uri, experiment, artifact_location}}` of
pipeline.yaml: a finished run (or a whole search, one nested run per trial) logged with
its stage settings as params, its measurements as metrics, its verdicts and
recommendations as tags, and its reports and recommended model files as artifacts.

    check(spec, base_dir)      before any work: the URI and the packages (ConfigError,
                               MissingDependency: bad input, exit 2)
    log_run / log_search       after the run's own reports are written; MLflow failing
                               (server down, database locked) raises TrackingFailed
    track_result               what the runner calls: log_run, TrackingFailed turned into
                               one warning line

mlflow is imported only inside these functions: `compress validate` stays instant.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

from compress.config.tracking import MlflowSpec, TrackingSpec
from compress.errors import CompressError, MissingDependency
from compress.core.lazy import require
from compress.runner.tracking.items import (MAX_PARAM_VALUE, MAX_TAG_VALUE, RunContent, choice_params,
                                     key, recommendation_metrics, recommended_files,
                                     report_files, run_content, summary_tags, text)
from compress.runner.tracking.uri import Store, artifact_location, check_location, resolve_store

_PIP = "mlflow-skinny sqlalchemy alembic"
_PURPOSE = "tracking.mlflow (logging runs to MLflow)"
# MLflow retries a server that does not answer for about 4 minutes by default; at the end
# of a run whose reports are written, a short wait and one warning line serve better.
# Used only where the user has not set these variables.
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


class TrackingFailed(CompressError):
    """MLflow could not take the run: the server is down, the database is locked or
    refuses a value. Raised only after the run's own reports are written, so a caller
    keeps the run's result and exit code and prints one line:
    "warning: not logged to MLflow: <the message>"."""


@dataclass(frozen=True)
class TrialRecord:
    """One search trial as MLflow logs it: a child run of the search's run."""
    id: str
    params: dict
    state: str                          # complete | failed | duplicate | skipped
    error: Optional[str] = None
    report: Optional[dict] = None       # the trial's own report (None when it has none)
    run_dir: Optional[Path] = None      # the folder holding that report


def _mlflow_spec(spec: TrackingSpec | MlflowSpec) -> MlflowSpec:
    found = spec.mlflow if isinstance(spec, TrackingSpec) else spec
    if found is None:
        raise TrackingFailed("tracking has no `mlflow:` section")
    return found


def _require(store: Store) -> None:
    require("mlflow", _PURPOSE)
    if store.kind in ("sqlite", "database"):
        for module in ("sqlalchemy", "alembic"):  # MLflow imports these only when it opens one
            if importlib.util.find_spec(module) is None:
                raise MissingDependency(module, _PIP, _PURPOSE)


def check(spec: TrackingSpec, base_dir: Path) -> None:
    """Before any work: the URI is one MLflow takes (a local store's folder can be made)
    and mlflow (with sqlalchemy and alembic for a database) is installed. Raises
    ConfigError naming tracking.mlflow.uri, or MissingDependency."""
    if spec.mlflow is None:
        return
    store = resolve_store(spec.mlflow.uri, Path(base_dir))
    check_location(spec.mlflow.artifact_location, Path(base_dir))
    _require(store)


def check_pipeline(pipeline) -> None:
    """check() for a Pipeline with `tracking:` set; nothing otherwise."""
    if pipeline.tracking is not None:
        check(pipeline.tracking, pipeline.base_dir)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """MLflow's INFO lines (tables created, experiment created) and short HTTP retries,
    for the time of the logging only."""
    logger = logging.getLogger("mlflow")
    level = logger.level
    logger.setLevel(logging.WARNING)
    added = {name: value for name, value in _HTTP_DEFAULTS.items() if name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        logger.setLevel(level)
        for name in added:
            os.environ.pop(name, None)


def _failures() -> tuple:
    from mlflow.exceptions import MlflowException
    found = [MlflowException, OSError]
    with contextlib.suppress(ImportError):
        from sqlalchemy.exc import SQLAlchemyError
        found.append(SQLAlchemyError)
    return tuple(found)


def _reason(exc: BaseException) -> str:
    """One line: where it failed (the head) and why (a connection error's tail)."""
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return line if len(line) <= 300 else f"{line[:140]} ... {line[-150:]}"


@contextlib.contextmanager
def _session(spec: MlflowSpec, base_dir: Path):
    """(client, experiment id); anything MLflow or the store raises becomes
    TrackingFailed (as does a URI no longer valid: the run's reports stand)."""
    try:
        store = resolve_store(spec.uri, Path(base_dir))
        _require(store)
    except CompressError as exc:
        raise TrackingFailed(str(exc)) from exc
    from mlflow.tracking import MlflowClient
    with _quiet():
        try:
            if store.folder is not None:
                store.folder.mkdir(parents=True, exist_ok=True)
            client = MlflowClient(tracking_uri=store.uri)
            yield client, _experiment_id(client, spec, store, Path(base_dir))
        except _failures() as exc:
            raise TrackingFailed(_reason(exc)) from exc


def _experiment_id(client, spec: MlflowSpec, store: Store, base_dir: Path) -> str:
    from mlflow.exceptions import MlflowException
    found = client.get_experiment_by_name(spec.experiment)
    if found is None:
        location = artifact_location(spec.artifact_location, store, base_dir)
        try:
            return client.create_experiment(spec.experiment, artifact_location=location)
        except MlflowException:
            found = client.get_experiment_by_name(spec.experiment)  # made meanwhile elsewhere
            if found is None:
                raise
    if found.lifecycle_stage == "deleted":
        raise TrackingFailed(f"experiment '{spec.experiment}' is deleted in MLflow: restore it "
                             f"(mlflow experiments restore --experiment-id "
                             f"{found.experiment_id}) or name another in "
                             "tracking.mlflow.experiment")
    return found.experiment_id


def _record(client, experiment_id: str, content: RunContent,
            parent_run_id: str | None = None) -> str:
    """One MLflow run holding `content`; ended FAILED if logging it fails half-way."""
    from mlflow.entities import Metric, Param, RunTag
    tags = {"mlflow.parentRunId": parent_run_id} if parent_run_id else {}
    run_id = client.create_run(experiment_id, run_name=content.name, tags=tags).info.run_id
    stamp = int(time.time() * 1000)
    try:
        client.log_batch(run_id,
                         metrics=[Metric(k, v, stamp, 0) for k, v in content.metrics.items()],
                         params=[Param(k, v) for k, v in content.params.items()],
                         tags=[RunTag(k, v) for k, v in content.tags.items()])
        for path, folder in content.files:
            client.log_artifact(run_id, str(path), folder)
    except BaseException:
        with contextlib.suppress(Exception):  # the first error is the one worth reporting
            client.set_terminated(run_id, "FAILED")
        raise
    client.set_terminated(run_id, content.status)
    return run_id


def log_run(spec: TrackingSpec, report: dict, run_dir: Path, *, base_dir: Path,
            run_name: str) -> str:
    """Log one finished run and return its MLflow run id (a search's trials are logged
    by log_search, nested under the search's run). Raises TrackingFailed when MLflow
    cannot take it."""
    content = run_content(report, Path(run_dir), run_name)
    with _session(_mlflow_spec(spec), base_dir) as (client, experiment_id):
        return _record(client, experiment_id, content)


def _search_files(report: dict, run_dir: Path, scratch: Path) -> list:
    files = report_files(run_dir)
    for name in ("pareto", "recommendations"):
        if name in report:
            path = scratch / f"{name}.json"
            path.write_text(json.dumps(report[name], indent=2, default=str), encoding="utf-8")
            files.append((path, None))
    return files + recommended_files(report, run_dir)


def _search_content(report: dict, run_dir: Path, run_name: str, trials: list,
                    scratch: Path) -> RunContent:
    search = report.get("search") or {}
    params = {key("search", "space", name): text(list(choices), MAX_PARAM_VALUE)
              for name, choices in (search.get("space") or {}).items()}
    if search.get("strategy"):
        params["search.strategy"] = search["strategy"]
    tags = {**summary_tags(report), "search.trials": str(len(trials))}
    return RunContent(run_name, params, recommendation_metrics(report), tags,
                      _search_files(report, Path(run_dir), scratch))


def _trial_content(trial: TrialRecord) -> RunContent:
    extra = {"trial.state": trial.state}
    if trial.error:
        extra["trial.error"] = text(trial.error, MAX_TAG_VALUE)
    if trial.state == "failed" or trial.report is None or trial.run_dir is None:
        status = "FAILED" if trial.state == "failed" else "FINISHED"
        return RunContent(trial.id, choice_params(trial.params), {}, extra, [], status)
    return run_content(trial.report, Path(trial.run_dir), trial.id, trial.params, extra)


def log_search(spec: TrackingSpec, report: dict, run_dir: Path, trials: list[TrialRecord], *,
               base_dir: Path, run_name: str) -> str:
    """Log a search: a parent run with the search's report, recommendations and Pareto
    front (JSON files), the recommended models, and one child run per trial (a failed
    one with its state and error, no metrics). Returns the parent's run id. Raises
    TrackingFailed when MLflow cannot take it (children logged so far stay)."""
    children = [_trial_content(trial) for trial in trials]
    with tempfile.TemporaryDirectory(prefix="compress-tracking-") as scratch, \
            _session(_mlflow_spec(spec), base_dir) as (client, experiment_id):
        parent = _search_content(report, Path(run_dir), run_name, trials, Path(scratch))
        parent_id = _record(client, experiment_id, parent)
        for child in children:
            _record(client, experiment_id, child, parent_id)
        return parent_id


def track_result(pipeline, result, note: Callable[[str], None]) -> Optional[str]:
    """Log a finished run when the pipeline has `tracking: {mlflow: ...}`; return the MLflow
    run id (None when not tracked or not logged). MLflow failing is one warning line
    through `note`: the run's reports, result and exit code stand."""
    if pipeline.tracking is None or pipeline.tracking.mlflow is None:
        return None
    spec = pipeline.tracking.mlflow
    try:
        run_id = log_run(pipeline.tracking, result.report, result.run_dir,
                         base_dir=pipeline.base_dir, run_name=pipeline.name)
    except TrackingFailed as exc:
        note(f"warning: not logged to MLflow: {exc}")
        return None
    note(f"logged to MLflow: experiment '{spec.experiment}', run {run_id}")
    return run_id
