"""Make the speech recordings in data/ once, with Debian's espeak-ng (run by hand):

    apt-get install -y espeak-ng
    .venv/bin/python examples/conformance/make_audio.py

The loaders read only the WAV files this writes (16 kHz, 16-bit, mono, leading and
trailing silence trimmed), so neither espeak-ng nor the network is needed at run time.
What is spoken:
  wake_<model>_<split>.wav   each wake phrase of pymicro-wakeword's four models, in one
                             voice for evaluation and another for calibration; voices
                             were chosen among espeak-ng's English ones so that the
                             package's own model fires on them (hey_jarvis fires on few)
  speech_<n>.wav             ordinary sentences in four voices (no wake phrase)
  sung_<n>.wav               "la la" sung high, in two voices (crepe)
"""
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np
from scipy.signal import resample_poly

DATA = Path(__file__).resolve().parent / "data"
RATE = 16000
# name: (text, espeak-ng voice, words per minute, pitch 0..99)
RECORDINGS = {
    "wake_okay_nabu_evaluation": ("Okay Nabu", "en-us", 140, 50),
    "wake_okay_nabu_calibration": ("Okay Nabu", "en-gb", 140, 50),
    "wake_hey_jarvis_evaluation": ("Hey Jarvis", "en-us+f3", 160, 50),
    "wake_hey_jarvis_calibration": ("Hey Jarvis", "en-gb-scotland", 160, 50),
    "wake_hey_mycroft_evaluation": ("Hey Mycroft", "en-gb", 140, 50),
    "wake_hey_mycroft_calibration": ("Hey Mycroft", "en-029", 140, 50),
    "wake_alexa_evaluation": ("Alexa", "en-gb", 140, 50),
    "wake_alexa_calibration": ("Alexa", "en-us+m3", 140, 50),
    "speech_0": ("Please turn off the kitchen lights.", "en-us+m3", 165, 45),
    "speech_1": ("The train leaves at half past seven.", "en-gb", 165, 55),
    "speech_2": ("Remind me to water the plants tomorrow.", "en-us+f3", 165, 60),
    "speech_3": ("My favourite song is on the radio.", "en-029", 165, 40),
    "sung_0": ("Laaa, laaa.", "en-us+f4", 120, 90),
    "sung_1": ("Laaa, laaa.", "en-us+f3", 120, 90),
}


def speak(text: str, voice: str, speed: int, pitch: int) -> np.ndarray:
    """espeak-ng's 22,050 Hz output resampled to 16 kHz int16, silence trimmed."""
    with tempfile.NamedTemporaryFile(suffix=".wav") as tmp:
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch),
                        "-w", tmp.name, text], check=True)
        with wave.open(tmp.name, "rb") as f:
            source_rate = f.getframerate()
            x = np.frombuffer(f.readframes(f.getnframes()), np.int16).astype(np.float64)
    x = resample_poly(x, RATE, source_rate)
    loud = np.flatnonzero(np.abs(x) > 0.01 * np.abs(x).max())
    x = x[max(0, loud[0] - 800):loud[-1] + 800]  # keep 50 ms around the speech
    return np.clip(np.rint(x), -32768, 32767).astype(np.int16)


def main() -> None:
    DATA.mkdir(exist_ok=True)
    total = 0
    for name, spec in RECORDINGS.items():
        samples = speak(*spec)
        with wave.open(str(DATA / f"{name}.wav"), "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(RATE)
            f.writeframes(samples.tobytes())
        total += (DATA / f"{name}.wav").stat().st_size
        print(f"{name}.wav  {len(samples) / RATE:.2f} s")
    print(f"{total / 1024:.0f} KiB in {DATA}")


if __name__ == "__main__":
    main()
