"""The baseline every speed-up and drop is measured against: the model the user gave,
in each format the benchmark measures. A source in that format is its own baseline; a
torch source is exported to FP32 with the pipeline's own export settings (a pruned or
distilled model is never the baseline, whatever the stages do), a causal language model
to its float onnxruntime-genai folder."""
from __future__ import annotations

from compress.stagebase import STAGES
from runtimes import formats


def baseline_config(pipeline, fmt: str):
    """The export stage config that makes the source's FP32 `fmt` model: the pipeline's
    first stage of that type with `input: source`, its quantizing settings left out
    (StageConfig.baseline_settings), else the default."""
    stage_type = formats.get(fmt).made_by
    config_cls = STAGES[stage_type].config_cls
    first = next((s for s in pipeline.stages if s.type == stage_type), None)
    settings = first.baseline_settings() if first is not None else {}
    return config_cls(**settings, input="source")


def formats_needed(candidates) -> list[str]:
    """The formats among `candidates` that have a float baseline (runtimes.formats)."""
    return sorted({artifact.format for artifact in candidates} & set(formats.names(baseline=True)))


def exported_from(fmt: str) -> str:
    """The source format whose float export in `fmt` is the baseline (an ONNX model is not
    converted to TFLite, nor TFLite to ONNX)."""
    return formats.get(fmt).made_from
