"""Silero VAD v6, the voice activity detector: silero_vad/data/silero_vad.onnx in the
`silero-vad` package (6.2.3, MIT), the file `load_silero_vad(onnx=True)` loads (its
default opset 16, written by spox). A stateful speech model: a short-time Fourier
transform as a Conv1d (magnitude = sqrt(re^2 + im^2)), four Conv1d + ReLU encoder
blocks, a one-layer LSTM (128 units) and a Conv1d + Sigmoid decoder; the whole graph sits
inside an If on the sample rate (one branch for 16 kHz, one for 8 kHz), with the LSTM
and more Ifs nested in the branches (ONNX subgraphs three deep).
Inputs `input` [1, 576] float32 (64 samples of context + 512 new samples at 16 kHz),
`state` [2, 1, 128] float32 (the LSTM's h and c), `sr` [] int64 (16000); outputs
`output` [1, 1] (the speech probability of the 32 ms) and `stateN` [2, 1, 128].

Data: one stream per split of the speech recordings in data/ (see make_audio.py), with
pauses of digital silence between them: calibration speech_0, speech_1 and the sung
sung_0; evaluation speech_2, speech_3 and sung_1 (other sentences, other voices). The
states are real: the FP32 model is run over the stream from the zero state, and each
feed's `state` is the one it held before that chunk, as a deployment streaming that
audio feeds it.

Pre-processing, as silero_vad's OnnxWrapper and get_speech_timestamps do it: 16-bit audio
/ 32768 (read_audio gives float in [-1, 1]), cut into chunks of 512 samples (the last
one zero-padded); each call gets the last 64 samples of the previous chunk (zeros at the
start) before its own, the state the previous call returned, and sr = 16000.
"""
import functools

import numpy as np

from audio import read_wav, silence
from packaged import package_file

CHUNK, CONTEXT, RATE = 512, 64, 16000
PAUSE = 0.4  # seconds of silence before each recording and after the last
RECORDINGS = {"calibration": ("speech_0", "speech_1", "sung_0"),
              "evaluation": ("speech_2", "speech_3", "sung_1")}


def model_path(name: str = "silero_vad") -> str:
    """silero_vad.onnx (the package's default), or silero_vad_16k_op15 (what
    load_silero_vad(onnx=True, opset_version=15) loads: 16 kHz only, written by torch
    2.3.1, the front end and encoder in the main graph and only the LSTM and decoder
    inside Ifs; the same inputs and outputs)."""
    return str(package_file("silero_vad", f"data/{name}.onnx"))


def stream(split: str) -> np.ndarray:
    """float32 audio in [-1, 1]: pause, recording, pause, recording, ..., pause."""
    parts = []
    for name in RECORDINGS[split]:
        parts += [silence(PAUSE), read_wav(name)]
    audio = np.concatenate(parts + [silence(PAUSE)]).astype(np.float32) / 32768.0
    return np.pad(audio, (0, -len(audio) % CHUNK))  # the last chunk zero-padded


@functools.lru_cache(maxsize=None)
def _feeds(split: str) -> tuple:
    """Every call of one split's stream, in order, with the FP32 model's state."""
    import onnxruntime as ort

    session = ort.InferenceSession(model_path(), providers=["CPUExecutionProvider"])
    audio, feeds = stream(split), []
    state, context = np.zeros((2, 1, 128), np.float32), np.zeros((1, CONTEXT), np.float32)
    for start in range(0, len(audio), CHUNK):
        x = np.concatenate([context, audio[None, start:start + CHUNK]], axis=1)
        feed = {"input": x, "state": state, "sr": np.array(RATE, np.int64)}
        feeds.append(feed)
        _, state = session.run(None, feed)
        context = x[:, -CONTEXT:]
    return tuple(feeds)


def speech(split: str) -> np.ndarray:
    """Per call, whether its 512 new samples are inside a recording (not a pause): a
    rough truth for the check, from the stream's own layout."""
    inside = []
    for name in RECORDINGS[split]:
        inside += [np.zeros(int(PAUSE * RATE), bool), np.ones(len(read_wav(name)), bool)]
    inside = np.concatenate(inside + [np.zeros(int(PAUSE * RATE), bool)])
    inside = np.pad(inside, (0, -len(inside) % CHUNK))
    return inside.reshape(-1, CHUNK).mean(axis=1) > 0.5


def evaluation() -> list:
    """About 230 calls of 32 ms, in order (one stream)."""
    return [dict(feed) for feed in _feeds("evaluation")]


def calibration() -> list:
    """About 230 calls of another stream."""
    return [dict(feed) for feed in _feeds("calibration")]
