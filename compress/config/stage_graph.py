"""The stage graph, checked before any work: each stage must be given a model format it
takes (a torch model for export.onnx, an ONNX or TFLite model for quantize, ...)."""
from __future__ import annotations

from dataclasses import dataclass

from compress.stagebase import STAGES

FORMAT_NAMES = {"torch": "a torch model", "onnx": "an ONNX model", "tflite": "a TFLite model",
                "openvino": "an OpenVINO IR model",
                "causal_lm": "a causal language model (Hugging Face weights)",
                "genai": "an onnxruntime-genai model folder", "gguf": "a GGUF file (llama.cpp)"}
DEPLOYABLE = ("onnx", "tflite", "openvino", "genai", "gguf")   # what the benchmark measures


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


def _problem(pipeline, index: int, given: str, parent: str, formats: dict) -> GraphProblem:
    """Stage `index` is given `given` (made by `parent`), which it cannot take; `formats`:
    the artifacts before it, one of which it may take instead."""
    stage = pipeline.stages[index]
    accepted = stage.formats()
    takes = " or ".join(FORMAT_NAMES[f] for f in accepted) or "no model"
    # earlier artifacts it could take instead, then what the stage itself suggests
    fixes = [f"`input: {name}`" + (" (the model as given)" if name == "source" else "")
             for name, fmt in formats.items() if fmt in accepted][:3]
    fixes += [hint for hint in [stage.format_hint(given)] if hint]
    fix = f" Fix: {'; or '.join(fixes)}" if fixes else ""
    return GraphProblem(index, "input", (
        f"stage {index + 1} ({stage.type}) takes {takes}, but its input is "
        f"{FORMAT_NAMES[given]} ({_origin(parent, pipeline)}).{fix}"))


def check_graph(pipeline) -> dict[str, str]:
    """{artifact name: format} for the source and every stage; GraphProblem when a stage
    is given a format it cannot take, or benchmark names an artifact it cannot run."""
    names, stages = pipeline.stage_names(), pipeline.stages
    formats, previous = {"source": pipeline.model.format}, "source"
    for index, (stage, name) in enumerate(zip(stages, names)):
        if not STAGES[stage.type].produces_artifacts:
            _check_benchmark(index, stage, formats)
            continue
        parent = stage.input or previous
        given = formats[parent]
        turns = stage.formats()
        if given not in turns:
            raise _problem(pipeline, index, given, parent, formats)
        formats[name] = turns[given]
        previous = name
    return formats


def _check_benchmark(index: int, stage, formats: dict) -> None:
    for name in getattr(stage, "artifacts", None) or ():
        if formats.get(name) not in DEPLOYABLE:
            known = ", ".join(n for n, f in formats.items() if f in DEPLOYABLE) or "none"
            raise GraphProblem(index, "artifacts", (
                f"benchmark.artifacts: '{name}' is not a deployable artifact of this "
                f"pipeline; those are: {known}"))
