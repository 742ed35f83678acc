"""What a stage can reach while it runs: the pipeline, data, models, its output folder."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from compress.artifacts import Artifact
from compress.config import Metric, Pipeline
from compress.data import Dataset, load_dataset
from compress.errors import DataError, ModelError
from compress.model_source import run_model
from compress.progress import Progress


@dataclass
class RunContext:
    pipeline: Pipeline
    progress: Progress
    run_dir: Path
    out_dir: Optional[Path] = None            # the running stage's private folder
    source_model: object = None               # the torch module as given, if any
    source_artifact: Optional[Artifact] = None
    targets: list = field(default_factory=list)  # [(target name, Profile)]
    committed: list = field(default_factory=list)  # stage folders this run wrote
    hosts: dict = field(default_factory=dict)  # {target name: RemoteHost} for ssh targets
    cleanup_warnings: list = field(default_factory=list)  # what a device kept after a run
    _datasets: dict = field(default_factory=dict)
    _reference: object = None

    def dataset(self, role: str) -> Optional[Dataset]:
        if role not in self._datasets:
            self._datasets[role] = load_dataset(self.pipeline, role)
        return self._datasets[role]

    def require_dataset(self, role: str, purpose: str) -> Dataset:
        data = self.dataset(role)
        if data is None:
            raise DataError(f"{purpose} needs data.{role} in the pipeline: a loader "
                            f"(`{role}: module:function`) or an .npz file (`{role}: file.npz`)")
        return data

    def metric(self) -> Metric:
        """The configured metric, or accuracy when evaluation data has labels."""
        if self.pipeline.data.metric is not None:
            return self.pipeline.data.metric
        data = self.dataset("evaluation")
        return Metric(type="accuracy" if data is not None and data.labels is not None
                      else "fidelity")

    def metric_baseline(self) -> float:
        """The source model's own metric: its accuracy, or 1.0 for fidelity (the original
        agrees with itself). Drops are measured from it."""
        if self.metric().type == "accuracy":
            from runtimes.metrics import accuracy
            data = self.require_dataset("evaluation", "the metric")
            return accuracy(self.reference_outputs(), data.labels)
        return 1.0

    def score(self, model_path: Path) -> float:
        """The metric of an ONNX/TFLite file on the evaluation data, in this process."""
        from compress.torch_eval import torch_metric
        self.require_dataset("evaluation", "the metric")
        return torch_metric(model_path, self)["value"]

    def reference_outputs(self):
        """The source model's first output on the evaluation inputs (computed once)."""
        if self._reference is None:
            data = self.require_dataset("evaluation", "the metric")
            model = self.source_model if self.source_model is not None else self.path(
                self.source_artifact)
            self._reference = run_model(model, self.pipeline, data.inputs)
        return self._reference

    def path(self, artifact: Artifact) -> Path:
        return self.run_dir / artifact.path

    def torch_model(self, artifact: Artifact):
        """The torch module of a torch artifact (a fresh copy for every call but the
        source, which stages must not modify: they deep-copy it first)."""
        if artifact.format != "torch":
            raise ModelError(f"artifact {artifact.id} is {artifact.format}, not a torch model")
        if self.source_artifact is not None and artifact.id == self.source_artifact.id \
                and self.source_model is not None:
            return self.source_model
        from compress.imports import import_callable
        from compress.torch_artifacts import load_torch_model
        factory = import_callable(artifact.meta["factory"], self.pipeline.base_dir, ModelError,
                                  f"artifact {artifact.id}")
        kwargs = artifact.meta.get("kwargs", {})
        return load_torch_model(self.path(artifact), lambda: factory(**kwargs))
