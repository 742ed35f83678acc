"""What a stage can reach while it runs: the pipeline, data, models, its output folder."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from compress.core.artifacts import Artifact
from compress.config.pipeline import Metric, Pipeline
from compress.data.feeds import Dataset, load_dataset
from compress.errors import DataError, ModelError
from compress.runner.progress import Progress


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
    fleets: dict = field(default_factory=dict)  # {target name: executors.fleet.Fleet}
    cleanup_warnings: list = field(default_factory=list)  # what a device kept after a run
    stage_cache: Optional[Path] = None        # stages shared by every run (stage_cache.py)
    measured: Optional[dict] = None           # a search's measurements, reused by its trials
    trial: bool = False                       # a search's trial: no page, no history of its own
    force: bool = False                       # remake every stage, reusing none
    compress_only: bool = False               # stages and baselines only (a Ray task)
    _datasets: dict = field(default_factory=dict)
    _reference: object = None
    _reference_names: object = None
    _scratch: object = None   # a temporary folder, for a ModelProto before the run starts
    _lm_text: object = None   # a language model's text as token ids (model.lm_text)
    _text: Optional[str] = None   # data.text as read once (a loader may be slow)

    @property
    def inputs(self) -> tuple:
        """The model's inputs (declared, or read from the file by the runner)."""
        return self.pipeline.model.inputs

    def dataset(self, role: str) -> Optional[Dataset]:
        if role not in self._datasets:
            self._datasets[role] = load_dataset(self.pipeline, role, self.inputs)
        return self._datasets[role]

    def require_dataset(self, role: str, purpose: str) -> Dataset:
        data = self.dataset(role)
        if data is None:
            raise DataError(f"{purpose} needs data.{role} in the pipeline: a loader "
                            f"(`{role}: module:function`) or an .npz file (`{role}: file.npz`)")
        return data

    def lm_text(self):
        """data.text in the source model's tokenizer (model.lm_text.TokenizedText), made
        once, after the source stage wrote the model's folder."""
        if self._lm_text is None:
            from compress.model.lm_text import tokenize
            self._lm_text = tokenize(self.pipeline.data.text, self.path(self.source_artifact),
                                     self.text())
        return self._lm_text

    def text(self) -> str:
        """data.text, read once (the preflight reads it first: its errors come early)."""
        if self._text is None:
            from compress.data.text import read_text
            self._text = read_text(self.pipeline.data.text, self.pipeline.base_dir)
        return self._text

    def text_digest(self) -> Optional[str]:
        """What data.text contributes to a stage's cache key: its settings and content."""
        spec = self.pipeline.data.text
        if spec is None:
            return None
        from compress.data.text import text_sha256
        return text_sha256(spec.model_dump_json(exclude={"loader"}) + self.text())

    def sample_feeds(self, count: int) -> tuple[list[dict], str]:
        """Up to `count` feeds of calibration (else evaluation) data, else random inputs
        of the declared shapes; with where they came from, for messages."""
        for role in ("calibration", "evaluation"):
            data = self.dataset(role)
            if data is not None:
                return data.take(count), f"data.{role}"
        check_random_fits(self.inputs, count)
        rng = np.random.default_rng(self.pipeline.seed)
        return ([{d.name: _random(rng, d) for d in self.inputs} for _ in range(count)],
                "random inputs (no data given)")

    def metric(self) -> Metric:
        """The configured metric, or accuracy when evaluation data has labels."""
        if self.pipeline.data.metric is not None:
            return self.pipeline.data.metric
        data = self.dataset("evaluation")
        labelled = data is not None and data.class_labels() is not None
        return Metric(type="accuracy" if labelled else "fidelity")

    def metric_baseline(self) -> float:
        """The source model's own metric (its accuracy, the custom metric of its outputs,
        or 1.0 for fidelity: the original agrees with itself). Drops are measured from it."""
        if self.metric().type == "fidelity":
            return 1.0
        from compress.data.metric import score_outputs
        return score_outputs(self, self.reference_outputs())["value"]

    def score(self, model_path: Path, nhwc: bool = False) -> dict:
        """The metric of an ONNX/TFLite file on the evaluation data, in this process."""
        from compress.data.metric import score_outputs
        from compress.model.run import run_feeds
        data = self.require_dataset("evaluation", "the metric")
        return score_outputs(self, run_feeds(model_path, self.inputs, list(data.feeds), nhwc))

    def reference_outputs(self) -> list[list]:
        """The source model's outputs on every evaluation feed (computed once)."""
        if self._reference is None:
            from compress.model.run import output_names, run_feeds
            data = self.require_dataset("evaluation", "the metric")
            model = self.source_model if self.source_model is not None else self.source_path()
            self._reference = run_feeds(model, self.inputs, list(data.feeds))
            self._reference_names = output_names(model, len(self._reference[0]))
        return self._reference

    def source_path(self) -> Path:
        """The ONNX or TFLite source as a file: committed in the run directory, else as
        given (before any work, when the preflight tries the user's metric on it)."""
        if self.source_artifact is not None:
            return self.path(self.source_artifact)
        model = self.pipeline.model
        given = model.onnx if model.onnx is not None else model.tflite
        if isinstance(given, str):
            return self.pipeline.resolve(given)
        import tempfile
        self._scratch = self._scratch or tempfile.TemporaryDirectory(prefix="edge-compress-")
        path = Path(self._scratch.name) / "source.onnx"
        if not path.is_file():  # an onnx.ModelProto given from Python
            path.write_bytes(given.SerializeToString())
        return path

    def reference_names(self) -> list[str]:
        """The source model's output names, in order."""
        self.reference_outputs()
        return self._reference_names

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
        from compress.model.torch_artifacts import load_torch_model
        return load_torch_model(self.path(artifact), self.torch_factory(artifact))

    def torch_factory(self, artifact: Artifact):
        """What rebuilds the architecture a torch artifact was made from."""
        from compress.core.imports import import_callable
        from compress.model.source import source_factory
        name = artifact.meta.get("factory")
        if name is None:  # the source's own (a module or function given from Python)
            return source_factory(self.pipeline)
        factory = import_callable(name, self.pipeline.base_dir, ModelError,
                                  f"artifact {artifact.id}")
        kwargs = artifact.meta.get("kwargs", {})
        return lambda: factory(**kwargs)


# Random inputs stand in for data only to time and trace a model: far larger than any edge
# model's input, a declared shape this big is a mistake, not a tensor to allocate.
RANDOM_LIMIT_BYTES = 1 << 30


def _shape(decl) -> tuple:
    return tuple(1 if size is None else size for size in decl.shape)


def check_random_fits(decls, count: int) -> None:
    """Refuse, before any is allocated, random inputs over RANDOM_LIMIT_BYTES a call or,
    `count` calls together, over half the memory available (runtimes.input_bounds'
    rule): the ModelError names the input, its shape, the bytes and the memory."""
    from runtimes.input_bounds import array_bytes, available_bytes, check_fits, size_text
    sizes = {d.name: array_bytes(_shape(d), d.dtype) for d in decls}
    fix = "check the shape, or give data (data.calibration / evaluation)"
    for decl in decls:
        if sizes[decl.name] > RANDOM_LIMIT_BYTES:
            raise ModelError(
                f"model.inputs: input '{decl.name}' declares shape {list(decl.shape)} "
                f"{decl.dtype}: {size_text(sizes[decl.name])} ({sizes[decl.name]:,} bytes) a "
                f"call, over the {size_text(RANDOM_LIMIT_BYTES)} random inputs may take "
                f"({size_text(available_bytes())} of memory available here); {fix}")
    if not decls:
        return
    # drawn as 64-bit numbers, then converted: the largest input's draw lives beside them
    worst = max(decls, key=lambda d: sizes[d.name])
    others = " and the others" if len(decls) > 1 else ""
    check_fits(f"model.inputs: drawing {count} random feeds of input '{worst.name}' (shape "
               f"{list(worst.shape)} {worst.dtype}){others}",
               count * sum(sizes.values())
               + max(array_bytes(_shape(d), "int64") for d in decls), fix, error=ModelError)


def _random(rng, decl) -> np.ndarray:
    if np.dtype(decl.dtype).kind in "iub":
        return rng.integers(0, 2, size=_shape(decl)).astype(decl.dtype)
    return rng.standard_normal(_shape(decl)).astype(decl.dtype)
