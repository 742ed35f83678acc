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
from compress.data.feeds import Samples
from compress.stagebase import StageConfig, Strict, register
from compress.model.spec import CALLABLE_NAME
from compress.model.stats import first_output
from compress.model.training import Objective, TrainSettings, check_labels, train
from compress.stages.distill_pair import Pair, check_outputs, loss_fn

# compress.config.pipeline imports every stage module to build its stage union, so a stage cannot
# import TorchSource from it: TeacherModel and StudentModel mirror its fields.
_FACTORY = CALLABLE_NAME   # the same pattern: its mistakes get the same message
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
            outs.append(first_output(out).numpy())
    return np.concatenate(outs)


def _train(pair: Pair, data, alpha: float, ctx, torch) -> tuple[object, list]:
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
    objective = Objective(loss_fn(pair, alpha, torch), evaluate if has_eval else None)
    result = train(pair.trainable, objective, Samples(inputs, data.labels), pair.config.train,
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
    pair = Pair(student, teacher, config, torch)
    try:
        s_out, t_out, projections = pair.probe(data.inputs, torch)
        check_outputs(s_out, t_out)
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
