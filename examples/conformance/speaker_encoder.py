"""Resemblyzer's speaker encoder (the GE2E voice encoder of Real-Time Voice Cloning): the
architecture in resemblyzer/voice_encoder.py (class VoiceEncoder: a 3-layer LSTM, 40 ->
256 units, batch first; Linear 256 -> 256, ReLU, L2 normalisation of the last layer's
final hidden state) and its weights resemblyzer/pretrained.pt, in the `resemblyzer`
package (0.1.4, Apache-2.0). Input `mels` [N, 160, 40] float32: 160 frames (1.6 s) of a
40-band mel POWER spectrogram (not a log: values from 0 to hundreds); output [N, 256], a
unit-length embedding of the voice.

The package's __init__ imports librosa and webrtcvad (not installed here), so `build`
executes resemblyzer/voice_encoder.py alone, giving it stand-ins for
`resemblyzer.hparams` (the package's own hparams.py, executed alone) and
`resemblyzer.audio` (unused by the model); VoiceEncoder then loads pretrained.pt itself.

Data: the recordings in data/ (see make_audio.py), each cut into the package's partial
utterances: calibration speech_0, speech_1, sung_0 and the calibration takes of the four
wake phrases; evaluation speech_2, speech_3, sung_1 and the evaluation takes (other
sentences, other voices).

Pre-processing, as resemblyzer's preprocess_wav and VoiceEncoder.embed_utterance do it:
16-bit audio / 32768; normalize_volume to -30 dBFS, increase only (trim_long_silences,
which needs webrtcvad, is left out: these recordings have no long silences); partial
utterances of 160 frames every round(16000 / rate / 160) frames, here with rate=8.0 (12
frames; the default 1.3 gives 77 frames, two partials per recording, too few feeds), the
last kept if it covers 75%, the audio zero-padded to the last one; librosa's
melspectrogram (n_fft 400, hop 160, Hann window, centred with zero padding, power 2,
40 Slaney mel bands with Slaney norm), reimplemented below with numpy. The package
embeds all partials of an utterance in one batch; here each partial is a feed [1, 160,
40] (the shape of every call is then the same).
"""
import types

import numpy as np

from audio import RATE, read_wav
from packaged import load_source, package_file

INPUT = "mels"
RATE_PARTIALS = 8.0  # embed_utterance(wav, rate=8.0): partials every 12 frames (default 1.3)
N_FFT, HOP, MELS, FRAMES = 400, 160, 40, 160
RECORDINGS = {"calibration": ("speech_0", "speech_1", "sung_0", "wake_okay_nabu_calibration",
                              "wake_hey_jarvis_calibration", "wake_hey_mycroft_calibration",
                              "wake_alexa_calibration"),
              "evaluation": ("speech_2", "speech_3", "sung_1", "wake_okay_nabu_evaluation",
                             "wake_hey_jarvis_evaluation", "wake_hey_mycroft_evaluation",
                             "wake_alexa_evaluation")}


def build():
    """resemblyzer's VoiceEncoder with its packaged weights, on the CPU, in eval mode."""
    hparams = load_source("resemblyzer", "hparams.py", "_resemblyzer_hparams")
    package = types.ModuleType("resemblyzer")
    package.audio = types.ModuleType("resemblyzer.audio")
    package.hparams = hparams
    stubs = {"resemblyzer": package, "resemblyzer.hparams": hparams,
             "resemblyzer.audio": package.audio}
    source = load_source("resemblyzer", "voice_encoder.py", "_resemblyzer_voice_encoder",
                         stubs=stubs)
    package_file("resemblyzer", "pretrained.pt")  # a clear error if it is missing
    return source.VoiceEncoder(device="cpu", verbose=False).eval()


def _hz_to_mel(hz):
    hz = np.asarray(hz, np.float64)
    mel = hz / (200.0 / 3)
    log = hz >= 1000.0
    return np.where(log, 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), mel)


def _mel_to_hz(mel):
    mel = np.asarray(mel, np.float64)
    return np.where(mel >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0)),
                    mel * (200.0 / 3))


def mel_filters() -> np.ndarray:
    """librosa.filters.mel(sr=16000, n_fft=400, n_mels=40): Slaney scale and norm."""
    freqs = np.linspace(0, RATE / 2, 1 + N_FFT // 2)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(RATE / 2), MELS + 2))
    ramps = edges[:, None] - freqs[None, :]
    widths = np.diff(edges)
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    return weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]


def mel_spectrogram(wav: np.ndarray) -> np.ndarray:
    """[frames, 40] float32 mel power, as resemblyzer.audio.wav_to_mel_spectrogram."""
    padded = np.pad(wav.astype(np.float64), N_FFT // 2)  # center=True, pad_mode="constant"
    count = 1 + len(wav) // HOP
    frames = padded[np.arange(count)[:, None] * HOP + np.arange(N_FFT)[None, :]]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2
    return (power @ mel_filters().T).astype(np.float32)


def normalize_volume(wav: np.ndarray, target_dbfs: float = -30) -> np.ndarray:
    change = target_dbfs - 10 * np.log10(np.mean(wav ** 2))
    return wav if change < 0 else wav * 10 ** (change / 20)  # increase_only=True


def partials(wav: np.ndarray, rate: float = RATE_PARTIALS,
             min_coverage: float = 0.75) -> np.ndarray:
    """[n, 160, 40]: the partial utterances of one waveform, as embed_utterance."""
    n_frames = int(np.ceil((len(wav) + 1) / HOP))
    step = int(np.round((RATE / rate) / HOP))
    starts = list(range(0, max(1, n_frames - FRAMES + step + 1), step))
    coverage = (len(wav) - starts[-1] * HOP) / (FRAMES * HOP)
    if coverage < min_coverage and len(starts) > 1:
        starts = starts[:-1]
    wav = np.pad(wav, (0, max(0, (starts[-1] + FRAMES) * HOP - len(wav))))
    mel = mel_spectrogram(wav)
    return np.stack([mel[s:s + FRAMES] for s in starts])


def samples(split: str) -> list:
    """(recording, [1, 160, 40] partial) of one split."""
    out = []
    for name in RECORDINGS[split]:
        wav = normalize_volume(read_wav(name).astype(np.float32) / 32768.0)
        out += [(name, p[None]) for p in partials(wav)]
    return out


def evaluation() -> list:
    """16 feeds [1, 160, 40]: the partials of seven recordings."""
    return [{INPUT: mel} for _, mel in samples("evaluation")]


def calibration() -> list:
    """17 feeds: the partials of seven other recordings."""
    return [{INPUT: mel} for _, mel in samples("calibration")]

