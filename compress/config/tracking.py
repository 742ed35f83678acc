"""`tracking:` of pipeline.yaml: where a run's parameters, metrics, verdicts, reports and
recommended files are logged (MLflow), besides the run directory."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from compress.stagebase import Strict


class MlflowSpec(Strict):
    uri: str = Field(description="MLflow tracking URI: a server (http://host:5000) or a "
                     "database (sqlite:///mlflow.db; a relative path is taken from the "
                     "pipeline's folder)")
    experiment: str = Field("edge-compress", min_length=1,
                            description="experiment the runs are logged under (created "
                            "when missing)")
    artifact_location: Optional[str] = Field(
        None, description="where a newly created experiment stores logged files (default: "
        "the tracking server's choice; for a sqlite URI, ./mlruns beside the database)")


class TrackingSpec(Strict):
    mlflow: Optional[MlflowSpec] = Field(None, description="log every run (and every "
                                         "search trial, nested) to MLflow")
