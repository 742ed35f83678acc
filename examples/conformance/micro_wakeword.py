"""microWakeWord streaming keyword spotters: the four int8 TFLite models shipped in
pymicro_wakeword/models/ (okay_nabu, hey_jarvis, hey_mycroft, alexa; TFLite converter
'MLIR Converted.', schema version 3, min runtime 2.6.0). Input `serving_default_input_
audio:0` [1, 3, 40] int8 (scale 0.10196, zero point -128): three 10 ms feature frames of
40 channels; output `StatefulPartitionedCall:0` [1, 1] uint8 (scale 1/256, zero point
0): the wake-word probability. The models are STATEFUL: six int8 ring buffers held in
resource variables (VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE, set to zero by a
CALL_ONCE init subgraph) carry the past frames from call to call, so one call is made
per 30 ms of audio, in order, without overlap (the package's stride). The package then
averages the last 5 outputs (sliding_window_size in the model's JSON) and fires above
the JSON's probability_cutoff (0.85 to 0.97).

Data: speech recordings in data/ (see make_audio.py): for each model, one continuous
stream of a short pause, the model's wake phrase, a pause and an ordinary sentence;
evaluation and calibration use different sentences and different voices. The phrase
comes first: after a sentence it scores lower (the front end's noise estimate and gain
have adapted to the speech; 'Alexa' then peaks at 0.33 instead of 1.00). The feeds
of a split are ONE stream, in order: run them in sequence on a freshly loaded model (the
package reloads the interpreter to reset it). A stream needs the whole phrase and a whole
sentence, so there are about 100 feeds per split (each is only 30 ms of audio).

Pre-processing, as pymicro_wakeword.MicroWakeWordFeatures and MicroWakeWord do it: the
16 kHz 16-bit audio goes in 160-sample chunks through pymicro_features.MicroFrontend
(TFLite Micro's audio front end: 30 ms window, 10 ms step, 40 filterbank channels, noise
reduction, PCAN gain control, log scale); each frame's 40 floats are (1, 1, 40); three
consecutive frames are concatenated to (1, 3, 40) and quantized as round(x / scale +
zero_point) in the input's dtype.
"""
import json

import numpy as np

from audio import read_wav, silence
from packaged import package_dir, package_file

MODELS = ("okay_nabu", "hey_jarvis", "hey_mycroft", "alexa")
CHUNK = 160  # samples per MicroFrontend call (10 ms), as MicroWakeWordFeatures
STRIDE = 3  # feature frames per call: the input's second dimension
PAUSE = 0.2  # seconds of silence before and after the wake phrase
SENTENCE = {"evaluation": "speech_3", "calibration": "speech_0"}


def model_path(name: str = "okay_nabu") -> str:
    return str(package_file("pymicro_wakeword", f"models/{name}.tflite"))


def config(name: str = "okay_nabu") -> dict:
    """The package's JSON for the model: wake_word, micro.probability_cutoff, ..."""
    return json.loads(package_file("pymicro_wakeword", f"models/{name}.json").read_text())


def input_details(name: str = "okay_nabu") -> dict:
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=model_path(name)).get_input_details()[0]


def features(samples: np.ndarray) -> np.ndarray:
    """(frames, 40) features of int16 audio, exactly as MicroWakeWordFeatures."""
    package_dir("pymicro_features")  # a clear error if it is missing
    from pymicro_features import MicroFrontend

    frontend, audio, frames, start = MicroFrontend(), samples.tobytes(), [], 0
    while start + 2 * CHUNK <= len(audio):
        result = frontend.process_samples(audio[start:start + 2 * CHUNK])
        start += 2 * result.samples_read
        if result.features:
            frames.append(result.features)
    # float64, as the package's np.array of Python floats: quantization rounds the same
    return np.asarray(frames, np.float64).reshape(-1, 40)


def parts(name: str, split: str) -> list:
    """The int16 pieces of one split's stream: pause, wake phrase, pause, sentence."""
    return [silence(PAUSE), read_wav(f"wake_{name}_{split}"), silence(PAUSE),
            read_wav(SENTENCE[split])]


def stream(name: str, split: str) -> np.ndarray:
    return np.concatenate(parts(name, split))


def feeds(name: str, split: str) -> list:
    details = input_details(name)
    scale, zero_point = details["quantization"]
    frames = features(stream(name, split))
    out = []
    for start in range(0, len(frames) - STRIDE + 1, STRIDE):  # stride, not rolling
        x = np.round(frames[start:start + STRIDE][None] / scale + zero_point)
        # no clipping, like the package: these features stay below 25.6 (127 is 26.0)
        out.append({details["name"]: x.astype(details["dtype"])})
    return out


def evaluation(name: str = "okay_nabu") -> list:
    """One stream, in order: the wake phrase, then a sentence in another voice ("My
    favourite song is on the radio.")."""
    return feeds(name, "evaluation")


def calibration(name: str = "okay_nabu") -> list:
    """One stream: the phrase in another voice, then another sentence and voice."""
    return feeds(name, "calibration")
