"""The speech recordings in data/ (made once by make_audio.py with espeak-ng), read with
the standard library's `wave` and numpy: 16 kHz, 16-bit, mono."""
import wave
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
RATE = 16000


def read_wav(name: str) -> np.ndarray:
    """data/<name>.wav as int16 samples; refuses anything but 16 kHz 16-bit mono."""
    path = DATA / f"{name}.wav"
    with wave.open(str(path), "rb") as f:
        if (f.getframerate(), f.getsampwidth(), f.getnchannels()) != (RATE, 2, 1):
            raise ValueError(f"{path}: 16 kHz 16-bit mono expected")
        return np.frombuffer(f.readframes(f.getnframes()), "<i2").astype(np.int16)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(round(seconds * RATE)), np.int16)
