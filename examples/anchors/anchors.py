"""The anchors: each CNN of the conformance corpus (examples/conformance/corpus.py), with
the pipeline stages that give every tool the same starting files.

Left out of the corpus: the OCR recognizer (its BiLSTM makes it a recurrent model), the
keyword spotter (it ships int8: nothing to quantize), MiniLM (a transformer) and the GRU.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CONFORMANCE = REPO / "examples" / "conformance"
for folder in (REPO, CONFORMANCE):  # the corpus' loaders import their neighbours
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from corpus import CORPUS, Entry  # noqa: E402

# the float TFLite file ai-edge-quantizer starts from, and the pipeline's own int8 of it
TFLITE_FP32 = {"type": "export.tflite", "name": "tflite-fp32", "input": "source", "mode": "fp32"}
TFLITE_INT8 = {"type": "export.tflite", "name": "tflite-int8", "input": "source", "mode": "int8"}


@dataclass(frozen=True)
class Anchor:
    entry: str          # the corpus entry's name
    classifier: bool    # its first output's rows are class scores: top-1 agreement means something
    tflite: bool        # a torch source: the pipeline can export it to TFLite too

    @property
    def corpus(self) -> Entry:
        return next(e for e in CORPUS if e.name == self.entry)

    def stages(self) -> list[dict]:
        """The corpus entry's stages, plus the float and int8 TFLite files where there is
        a TFLite route (a stage the entry already has is kept as it is)."""
        stages = list(self.corpus.stages)
        if self.tflite:
            names = {stage.get("name") for stage in stages}
            stages += [s for s in (TFLITE_FP32, TFLITE_INT8) if s["name"] not in names]
        return stages


ANCHORS = (
    Anchor("YOLOv8n detector", classifier=False, tflite=False),
    Anchor("OCR detector (YOLOX-style)", classifier=False, tflite=False),
    Anchor("text orientation classifier", classifier=True, tflite=False),
    # CREPE's output is one probability per 20-cent pitch bin: the top bin is the pitch
    Anchor("CREPE tiny pitch tracker", classifier=True, tflite=True),
    Anchor("EfficientNet-Lite0", classifier=True, tflite=True),
)


def chosen(only: list[str] | None) -> list[Anchor]:
    return [a for a in ANCHORS if not only or any(o.lower() in a.entry.lower() for o in only)]
