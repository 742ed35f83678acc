"""The stage graph, checked before any work: each stage must be given a model format it
takes (a torch model for export.onnx, an ONNX or TFLite model for quantize, ...)."""
from __future__ import annotations

from dataclasses import dataclass

from compress.stagebase import STAGES
from runtimes import formats


@dataclass(frozen=True)
class GraphProblem(Exception):
    index: int      # the stage (from 0)
    key: str        # the setting to change
    message: str


def _origin(parent: str, pipeline) -> str:
    if parent == "source":
        return "the model as given"
    index = pipeline.stage_names().index(parent)
    return f"made by stage {index + 1} ({pipeline.stages[index].type})"


def _problem(pipeline, index: int, given: str, parent: str, made: dict) -> GraphProblem:
    """Stage `index` is given `given` (made by `parent`), which it cannot take; `made`:
    the artifacts before it, one of which it may take instead."""
    stage = pipeline.stages[index]
    accepted = stage.formats()
    takes = " or ".join(formats.get(f).noun for f in accepted) or "no model"
    # earlier artifacts it could take instead, then what the stage itself suggests
    fixes = [f"`input: {name}`" + (" (the model as given)" if name == "source" else "")
             for name, fmt in made.items() if fmt in accepted][:3]
    fixes += [hint for hint in [stage.format_hint(given)] if hint]
    fix = f" Fix: {'; or '.join(fixes)}" if fixes else ""
    return GraphProblem(index, "input", (
        f"stage {index + 1} ({stage.type}) takes {takes}, but its input is "
        f"{formats.get(given).noun} ({_origin(parent, pipeline)}).{fix}"))


def check_graph(pipeline) -> dict[str, str]:
    """{artifact name: format} for the source and every stage; GraphProblem when a stage
    is given a format it cannot take, or benchmark names an artifact it cannot run."""
    names, stages = pipeline.stage_names(), pipeline.stages
    made, previous = {"source": pipeline.model.format}, "source"
    for index, (stage, name) in enumerate(zip(stages, names)):
        if not STAGES[stage.type].produces_artifacts:
            _check_benchmark(index, stage, made)
            continue
        parent = stage.input or previous
        given = made[parent]
        turns = stage.formats()
        if given not in turns:
            raise _problem(pipeline, index, given, parent, made)
        made[name] = turns[given]
        previous = name
    return made


def _check_benchmark(index: int, stage, made: dict) -> None:
    deployable = formats.names(deployable=True)   # what the benchmark measures
    for name in getattr(stage, "artifacts", None) or ():
        if made.get(name) not in deployable:
            known = ", ".join(n for n, f in made.items() if f in deployable) or "none"
            raise GraphProblem(index, "artifacts", (
                f"benchmark.artifacts: '{name}' is not a deployable artifact of this "
                f"pipeline; those are: {known}"))
