"""`distill`: train a student model on a teacher's softened outputs (knowledge distillation).

The teacher is the model as given (default) or another torch model; the student is the
artifact this stage receives (e.g. a pruned model) or a smaller architecture the user
names. Loss: alpha * T^2 * KL(teacher || student) at temperature T, plus (1 - alpha) *
cross-entropy when data.train has labels, plus optional MSE between intermediate
features (through a learned projection that is trained with the student and then thrown
away). Only the student is saved.
"""
from __future__ import annotations

import copy
from typing import Annotated, Any, Literal, Optional, Union

import numpy as np
from pydantic import (Discriminator, Field, NonNegativeFloat, PositiveFloat, Tag,
                      model_validator)

from compress.core.artifacts import Output
from compress.errors import ModelError
from compress.core.imports import import_callable
from compress.core.lazy import require
from compress.stagebase import StageConfig, Strict, register
from compress.model.training import TrainSettings, check_labels, train

# compress.config.pipeline imports every stage module to build its stage union, so a stage cannot
# import TorchSource from it: TeacherModel and StudentModel mirror its fields.
_FACTORY = r"^[\w.]+:[\w.]+$"
_PROBE_SAMPLES = 8  # a training batch this size checks shapes before any training
_TEACHER_KEY = "\0teacher outputs"  # a NUL byte: no real input name clashes with it


class TeacherModel(Strict):
    factory: Optional[str] = Field(
        None, pattern=_FACTORY, description="`module.path:callable` returning a "
        "torch.nn.Module (default: the pipeline's model.torch.factory)")
    checkpoint: Optional[str] = Field(
        None, description="state_dict file, loaded with torch.load(weights_only=True)")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="arguments for the factory")

    @model_validator(mode="after")
    def _weights_from_somewhere(self):
        # The pipeline's factory without a checkpoint would be an untrained teacher.
        if self.factory is None and self.checkpoint is None:
            raise ValueError("give the teacher's `checkpoint` (and `factory` if it is not the "
                             "pipeline's model), or use `teacher: source`")
        return self


class StudentModel(Strict):
    factory: str = Field(pattern=_FACTORY, description="`module.path:callable` building "
                         "the student architecture (a torch.nn.Module)")
    checkpoint: Optional[str] = Field(None, description="initial weights (state_dict)")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="arguments for the factory")


class FeaturePair(Strict):
    student: str = Field(description="student module name, e.g. features.3")
    teacher: str = Field(description="teacher module name whose output the student matches")


def _word_or_mapping(value) -> str:
    return "word" if isinstance(value, str) else "mapping"


def _either(word: str, model: type):
    """`word` or a mapping; the discriminator keeps errors to the form the user wrote."""
    return Annotated[Union[Annotated[Literal[word], Tag("word")],
                           Annotated[model, Tag("mapping")]], Discriminator(_word_or_mapping)]


class Distill(StageConfig):
    type: Literal["distill"] = Field("distill", description="knowledge distillation: train "
                                     "the student on the teacher's outputs")
    teacher: _either("source", TeacherModel) = Field(
        "source", description="`source` (the model as given) or {factory, checkpoint, kwargs}")
    student: _either("input", StudentModel) = Field(
        "input", description="`input` (the artifact this stage receives) or {factory, "
        "kwargs, checkpoint} for another (smaller) architecture")
    temperature: PositiveFloat = Field(4.0, description="softmax temperature T of the KL term")
    alpha: float = Field(0.7, ge=0, le=1, description="weight of the KL term; 1 - alpha "
                         "weighs cross-entropy on labels (1 without labels)")
    features: tuple[FeaturePair, ...] = Field((), description="intermediate outputs to match")
    feature_weight: NonNegativeFloat = Field(1.0, description="weight of the feature MSE")
    train: TrainSettings = Field(TrainSettings(), description="the training loop's settings")

    def external_inputs(self) -> dict[str, object]:
        models = {role: m for role, m in (("teacher", self.teacher), ("student", self.student))
                  if not isinstance(m, str)}
        return {f"{role}.{key}": item for role, m in models.items()
                for key, item in (("factory", m.factory), ("checkpoint", m.checkpoint)) if item}

    def formats(self) -> dict[str, str]:
        return {"torch": "torch"}

    def format_hint(self, given: str) -> str:
        return "distill trains a torch model: put it before any export stage"

    def required_data(self) -> tuple[str, ...]:
        return ("train",)


def _first(output):
    return output[0] if isinstance(output, (tuple, list)) else output


def _call_factory(spec, kwargs: dict, ctx, what: str):
    """`spec`: `module:callable`, or the callable itself (a pipeline built in Python)."""
    torch = require("torch", "distill")
    factory = (import_callable(spec, ctx.pipeline.base_dir, ModelError, what)
               if isinstance(spec, str) else spec)
    try:
        model = factory(**kwargs)
    except (Exception, SystemExit) as exc:  # user code (sys.exit too)
        raise ModelError(f"{what} '{spec}' raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"{what} '{spec}' returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _load_weights(model, checkpoint: str, ctx, what: str) -> None:
    from compress.model.source import load_checkpoint
    load_checkpoint(model, ctx.pipeline.resolve(checkpoint), require("torch", "distill"), what)


def _teacher(config: Distill, ctx) -> tuple[object, dict]:
    """The teacher module (never trained here) and how the report describes it."""
    source = ctx.pipeline.model.torch
    if config.teacher == "source":
        if source is None:
            raise ModelError("`teacher: source` needs a torch model (model.torch); for an ONNX "
                             "model give `teacher: {factory: ..., checkpoint: ...}`")
        return ctx.torch_model(ctx.source_artifact), {
            "source": True, "factory": _named(source.factory), "kwargs": source.kwargs,
            "checkpoint": source.checkpoint}
    spec = config.teacher
    factory = spec.factory or (source.factory if source is not None else None)
    if factory is None or (spec.factory is None and source.module is not None):
        raise ModelError("teacher.factory is needed: the pipeline's model is not a torch factory")
    kwargs = spec.kwargs
    if spec.factory is None and not kwargs:  # the pipeline's factory: its kwargs too
        kwargs = source.kwargs
    model = _call_factory(factory, kwargs, ctx, "teacher.factory")
    if spec.checkpoint:
        _load_weights(model, spec.checkpoint, ctx, "teacher.checkpoint")
    return model.eval(), {"source": False, "factory": _named(factory), "kwargs": kwargs,
                          "checkpoint": spec.checkpoint}


def _named(factory) -> Optional[str]:
    return factory if isinstance(factory, str) or factory is None else "(a Python callable)"


def _student(config: Distill, artifact, ctx) -> tuple[object, str, dict]:
    """A trainable student and the factory + kwargs that rebuild its architecture."""
    torch = require("torch", "distill")
    torch.manual_seed(config.train.seed)  # a fresh architecture starts reproducibly
    if config.student == "input":
        if artifact.format != "torch":
            raise ModelError(f"distill takes a torch model but got {artifact.format} artifact "
                             f"{artifact.id}; put distill before export.onnx, or name a "
                             "student architecture with `student: {factory: ...}`")
        model = ctx.torch_model(artifact)
        if artifact.id == ctx.source_artifact.id:  # shared by every stage: train a copy
            model = copy.deepcopy(model)
        return model, artifact.meta["factory"], dict(artifact.meta.get("kwargs", {}))
    spec = config.student
    model = _call_factory(spec.factory, spec.kwargs, ctx, "student.factory")
    if spec.checkpoint:
        _load_weights(model, spec.checkpoint, ctx, "student.checkpoint")
    return model.eval(), spec.factory, dict(spec.kwargs)


def _modules(model, names: list[str], role: str) -> dict:
    known = dict(model.named_modules())
    for name in names:
        if name not in known:
            some = ", ".join(n for n in list(known)[1:13])
            raise ModelError(f"distill features: the {role} has no module '{name}'; some of "
                             f"its modules: {some}")
    return {name: known[name] for name in names}


def _hook(model, names: list[str], role: str, store: dict) -> list:
    """Forward hooks that keep the latest output of each named module in `store`."""
    handles = []
    for name, module in _modules(model, names, role).items():
        def keep(_module, _inputs, output, name=name):
            store[name] = _first(output)
        handles.append(module.register_forward_hook(keep))
    return handles


def _projection(pair: FeaturePair, s_shape, t_shape, torch):
    """Maps a student feature onto the teacher's width (identity when they match)."""
    where = f"distill features {pair.student} -> {pair.teacher}"
    if len(s_shape) != len(t_shape) or tuple(s_shape[2:]) != tuple(t_shape[2:]):
        raise ModelError(f"{where}: the student's output {tuple(s_shape)} and the teacher's "
                         f"{tuple(t_shape)} differ in rank or spatial size; pick layers at "
                         "the same resolution")
    if s_shape[1] == t_shape[1]:
        return torch.nn.Identity(), "identity"
    if len(s_shape) == 4:
        return torch.nn.Conv2d(s_shape[1], t_shape[1], 1), f"conv1x1 {s_shape[1]}->{t_shape[1]}"
    if len(s_shape) == 2:
        return torch.nn.Linear(s_shape[1], t_shape[1]), f"linear {s_shape[1]}->{t_shape[1]}"
    raise ModelError(f"{where}: widths {s_shape[1]} and {t_shape[1]} differ; projections "
                     "exist for 2-D (N, C) and 4-D (N, C, H, W) features only")


class _Pair:
    """Student, teacher and the feature projections, wired up for one training run."""

    def __init__(self, student, teacher, config: Distill, torch):
        self.student, self.teacher, self.config = student, teacher, config
        self.s_feats, self.t_feats = {}, {}
        self.handles = (
            _hook(student, [p.student for p in config.features], "student", self.s_feats)
            + _hook(teacher, [p.teacher for p in config.features], "teacher", self.t_feats))
        # One module holding student + projections, so train() optimises both and keeps
        # the best epoch of both; only `.student` is saved afterwards.
        self.trainable = torch.nn.Module()
        self.trainable.student = student
        self.trainable.projections = torch.nn.ModuleList()
        self.trainable.forward = student.forward  # the loss calls the student through it

    def probe(self, inputs: dict, torch) -> tuple[object, object, list[str]]:
        """Run both models on a training batch; build projections; return both outputs."""
        args = [torch.from_numpy(a[:_PROBE_SAMPLES]) for a in inputs.values()]
        self.student.eval()
        with torch.no_grad():
            s_out, t_out = _first(self.student(*args)), _first(self.teacher(*args))
        described = []
        for pair in self.config.features:
            proj, text = _projection(pair, self.s_feats[pair.student].shape,
                                     self.t_feats[pair.teacher].shape, torch)
            self.trainable.projections.append(proj)
            described.append(text)
        return s_out, t_out, described

    def close(self) -> None:
        for handle in self.handles:  # the teacher may be the shared source module
            handle.remove()


def _check_outputs(s_out, t_out) -> None:
    if tuple(s_out.shape) != tuple(t_out.shape):
        raise ModelError(f"the teacher's output has shape {tuple(t_out.shape)} but the "
                         f"student's has shape {tuple(s_out.shape)} on a training batch; "
                         "both must score the same classes")
    if s_out.ndim != 2:
        raise ModelError(f"distill needs class scores shaped (batch, classes); the models "
                         f"return {tuple(s_out.shape)}")


def _loss_fn(pair: _Pair, alpha: float, torch):
    F = torch.nn.functional
    config, temperature = pair.config, pair.config.temperature

    def loss(model, xs, labels):
        *xs, t_out = xs  # the teacher's outputs ride along as the last "input"
        s_out = _first(model(*xs))
        if config.features:
            with torch.no_grad():
                pair.teacher(*xs)  # fills pair.t_feats through the hooks
        # T^2 keeps the soft-target gradients on the same scale as the hard-label ones.
        total = alpha * temperature ** 2 * F.kl_div(
            F.log_softmax(s_out / temperature, 1), F.log_softmax(t_out / temperature, 1),
            reduction="batchmean", log_target=True)
        if alpha < 1 and labels is not None:
            total = total + (1 - alpha) * F.cross_entropy(s_out, labels)
        if config.features:
            feature = sum(F.mse_loss(proj(pair.s_feats[p.student]), pair.t_feats[p.teacher])
                          for p, proj in zip(config.features, model.projections))
            total = total + config.feature_weight * feature / len(config.features)
        return total
    return loss


def _metric(model, ctx) -> Optional[float]:
    from compress.model.torch_eval import torch_metric
    result = torch_metric(model, ctx)
    return None if result is None else result["value"]


def _teacher_outputs(teacher, inputs: dict, torch, batch: int = 64):
    """The teacher's first output over the samples, in batches."""
    total, outs = len(next(iter(inputs.values()))), []
    with torch.no_grad():
        for start in range(0, total, batch):
            out = teacher(*[torch.from_numpy(a[start:start + batch]) for a in inputs.values()])
            outs.append((out[0] if isinstance(out, (tuple, list)) else out).numpy())
    return np.concatenate(outs)


def _train(pair: _Pair, data, alpha: float, ctx, torch) -> tuple[object, list]:
    """Train; return train()'s result and every evaluation (the first is before training)."""
    seen = []
    has_eval = ctx.dataset("evaluation") is not None

    def evaluate(model):
        seen.append(_metric(model.student, ctx))
        return seen[-1]
    # The teacher is fixed and the inputs are the same every epoch: running it once over
    # data.train (instead of on every batch of every epoch) often halves the training time.
    # train() slices every array of `inputs` with the same batch indices.
    inputs = {**data.inputs, _TEACHER_KEY: _teacher_outputs(pair.teacher, data.inputs, torch)}
    result = train(pair.trainable, _loss_fn(pair, alpha, torch), inputs, data.labels,
                   pair.config.train, evaluate=evaluate if has_eval else None,
                   progress=ctx.progress, label="distill")
    return result, seen


@register(Distill)
def run(artifact, config: Distill, ctx) -> list[Output]:
    torch = require("torch", "distill")
    from compress.model.torch_artifacts import save_torch_model
    data = ctx.require_dataset("train", "distill").samples("distill")
    teacher, described = _teacher(config, ctx)
    student, factory, kwargs = _student(config, artifact, ctx)
    alpha = config.alpha if data.labels is not None else 1.0
    pair = _Pair(student, teacher, config, torch)
    try:
        s_out, t_out, projections = pair.probe(data.inputs, torch)
        _check_outputs(s_out, t_out)
        check_labels(data.labels, s_out.shape[1])
        ctx.progress.note(f"distill: {len(data)} training samples, T={config.temperature:g}, "
                          f"alpha={alpha:g}, {len(config.features)} feature pair(s)")
        result, seen = _train(pair, data, alpha, ctx, torch)
    finally:
        pair.close()
    path = ctx.out_dir / "model.pt"
    save_torch_model(student.eval(), path)
    metric_after = result.best_metric
    ctx.progress.note(f"distill: best epoch {result.best_epoch} of {result.epochs_run}"
                      + (f", metric {seen[0]:.4f} -> {metric_after:.4f}" if seen else ""))
    features = [{"student": p.student, "teacher": p.teacher, "projection": text}
                for p, text in zip(config.features, projections)]
    meta = {"factory": factory, "kwargs": kwargs, "teacher": described,
            "temperature": config.temperature, "alpha": alpha, "features": features,
            "best_epoch": result.best_epoch, "epochs_run": result.epochs_run,
            "history": result.history, "metric_before": seen[0] if seen else None,
            "metric_after": metric_after, "metric_teacher": _metric(teacher, ctx)}
    return [Output(path, "torch", "fp32", meta)]
