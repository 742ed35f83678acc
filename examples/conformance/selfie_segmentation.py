"""MediaPipe's Selfie Segmentation (general model, the ML Kit 'selfiesegmentation_mlkit-
256x256-2021_01_19-v1215'): mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite
in the `mediapipe` wheel (0.10.14, Apache-2.0), as apps ship it: NO SignatureDef, 110
float16 weights behind DEQUANTIZE ops, HARD_SWISH, and one custom op,
`Convolution2DTransposeBias` (MediaPipe's transposed convolution with bias, run by
LiteRT's default XNNPACK delegate). A MobileNetV3-style encoder-decoder.
Input `input_1` [1, 256, 256, 3] float32 RGB in [0, 1]; output `activation_10`
[1, 256, 256, 1]: the probability that each pixel shows a person.

Data: windows of photos of people (scikit-image's astronaut and cameraman, matplotlib's
Grace Hopper portrait), from head-and-shoulders to the whole photo, and of photos
without people (scikit-image's cat, coffee, rocket, motorcycle; scikit-learn's china and
flower). Evaluation and calibration use different windows; calibration windows are also
mirrored (a selfie camera mirrors).

Pre-processing, as MediaPipe's selfie_segmentation_cpu graph does it
(ImageToTensorCalculator: 256x256, keep_aspect_ratio false, output_tensor_float_range
[0, 1]): the RGB window stretched to 256x256 with bilinear sampling and no antialiasing
(OpenCV's warp), then x / 255. The mask comes back at 256x256 (the graph then resizes it
to the image).
"""
import numpy as np

from face_detection import FACE_CENTRE, OTHERS, picture
from imaging import crop, cv2_resize, window_feeds
from packaged import package_file

SIZE = 256
INPUT = "input_1"
PEOPLE = ("astronaut", "camera", "grace_hopper")
# (cx, cy, width, height) as fractions of the photo; None: around the face (below)
EVAL_WINDOWS = ((0.5, 0.5, 1.0, 1.0), (0.5, 0.45, 0.75, 0.9), (0.45, 0.55, 0.8, 0.7),
                (0.55, 0.4, 0.65, 0.65))
CALIBRATION_WINDOWS = ((0.5, 0.5, 0.9, 0.85), (0.45, 0.45, 0.7, 0.8), (0.55, 0.55, 0.85, 0.6))
HEAD_SIZES = {"evaluation": (0.55, 0.4), "calibration": (0.5, 0.45)}  # around the face


def model_path() -> str:
    return str(package_file("mediapipe", "modules/selfie_segmentation/selfie_segmentation.tflite"))


def preprocess(rgb: np.ndarray) -> np.ndarray:
    """An RGB uint8 window -> [1, 256, 256, 3] float32 in [0, 1] (stretched)."""
    return (cv2_resize(rgb, (SIZE, SIZE), "linear").astype(np.float32) / np.float32(255))[None]


def windows(split: str) -> list:
    """(name, RGB window) of one split, people first."""
    evaluation = split == "evaluation"
    out = []
    for name in PEOPLE:
        rgb = picture(name)
        for window in EVAL_WINDOWS if evaluation else CALIBRATION_WINDOWS:
            out.append((name, crop(rgb, *window)))
        fx, fy = FACE_CENTRE[name]
        for size in HEAD_SIZES[split]:  # head and shoulders, a selfie's framing
            out.append((name, crop(rgb, fx, fy + size / 4, size, size)))
    for name in OTHERS:
        for window in (EVAL_WINDOWS[:3] if evaluation else CALIBRATION_WINDOWS[:2]):
            out.append((name, crop(picture(name), *window)))
    return out


def _feeds(split: str, mirror: bool) -> list:
    return window_feeds(windows(split), INPUT, preprocess, mirror)


def evaluation() -> list:
    """36 feeds: 6 windows of each photo of people, 3 of each of six others."""
    return _feeds("evaluation", mirror=False)


def calibration() -> list:
    """54 feeds: 5 other windows of each photo of people, 2 of each other photo, each
    also mirrored."""
    return _feeds("calibration", mirror=True)
