"""MediaPipe's face mesh (Face Landmark, 'facemesh-lite'): mediapipe/modules/face_landmark/
face_landmark.tflite in the `mediapipe` wheel (0.10.14, Apache-2.0), as apps ship it:
NO SignatureDef, its operator codes only in `deprecated_builtin_code`, 113 float16 weights
behind DEQUANTIZE ops, and 23 PRELU activations (ai-edge-quantizer has no int8 PRELU).
A regression model: input `input_1` [1, 192, 192, 3] float32 RGB in [0, 1], a face crop;
outputs `conv2d_21` [1, 1, 1, 1404] (468 landmarks x, y, z in the crop's 192-pixel
units) and `conv2d_31` [1, 1, 1, 1] (face-presence logit).

Data: the faces of face_detection.py (astronaut, cameraman, Grace Hopper), each cropped
as MediaPipe crops it from a face detection (face_detection.py's model, FP32, on that
split's windows), then with the small changes of angle, scale and position that the
ROI of a tracked face has from frame to frame; evaluation and calibration use different
windows and different changes.

Pre-processing, as MediaPipe's face_landmark_front_cpu graph does it: the detection's
box gives the ROI's centre and size, its rotation makes the line between the two eye
keypoints (0 and 1) level (target angle 0); the ROI is made square on its long side and
scaled by 1.5 (RectTransformationCalculator); ImageToTensorCalculator samples the rotated
square to 192x192 (bilinear, no antialiasing, border pixels replicated) and scales to
[0, 1].
"""
import numpy as np

import face_detection as detector
from packaged import package_file

SIZE = 192
INPUT = "input_1"
SCALE = 1.5
# (degrees, scale factor, shift x, shift y as fractions of the ROI side) per crop
JITTER = {"evaluation": ((0, 1.0, 0, 0), (8, 1.05, 0.03, -0.02), (-10, 0.95, -0.04, 0.03),
                         (15, 1.1, 0.02, 0.05)),
          "calibration": ((0, 1.0, 0, 0), (-6, 1.08, -0.03, 0.0), (11, 0.92, 0.04, -0.04))}
EVERY = {"evaluation": 3, "calibration": 1}  # of the detector's face windows


def model_path() -> str:
    return str(package_file("mediapipe", "modules/face_landmark/face_landmark.tflite"))


def roi(window: np.ndarray) -> tuple | None:
    """(centre x, centre y, side, radians) in the window's pixels, from the FP32
    detector's best face; None if it finds none."""
    faces = detector.detect(*detector.run({detector.INPUT: detector.preprocess(window)}))
    if not faces:
        return None
    _, box, points = max(faces, key=lambda f: f[0])
    h, w = window.shape[:2]
    (x0, y0), (x1, y1) = points[0] * (w, h), points[1] * (w, h)
    angle = -np.arctan2(-(y1 - y0), x1 - x0)  # target angle 0: the eyes level
    side = max((box[2] - box[0]) * w, (box[3] - box[1]) * h) * SCALE
    return ((box[0] + box[2]) / 2 * w, (box[1] + box[3]) / 2 * h, side, angle)


def sample(image: np.ndarray, centre: tuple, side: float, angle: float) -> np.ndarray:
    """The rotated square ROI resampled to SIZE x SIZE: bilinear, border replicated, as
    OpenCV's warpAffine in MediaPipe's ImageToTensorCalculator; float32 (H, W, 3)."""
    u = (np.arange(SIZE) + 0.5) / SIZE - 0.5
    gx, gy = np.meshgrid(u * side, u * side)
    cos, sin = np.cos(angle), np.sin(angle)
    sx = centre[0] + gx * cos - gy * sin - 0.5
    sy = centre[1] + gx * sin + gy * cos - 0.5
    h, w = image.shape[:2]
    x0, y0 = np.floor(sx).astype(int), np.floor(sy).astype(int)
    fx, fy = (sx - x0)[..., None], (sy - y0)[..., None]

    def pick(y, x):
        return image[np.clip(y, 0, h - 1), np.clip(x, 0, w - 1)].astype(np.float32)

    top = pick(y0, x0) * (1 - fx) + pick(y0, x0 + 1) * fx
    bottom = pick(y0 + 1, x0) * (1 - fx) + pick(y0 + 1, x0 + 1) * fx
    return (top * (1 - fy) + bottom * fy).astype(np.float32)


def crops(split: str) -> list:
    """(window, centre, side, radians) of every crop of one split."""
    out = []
    faces = [window for name, window in detector.windows(split) if name in detector.FACES]
    for window in faces[::EVERY[split]]:
        found = roi(window)
        if found is None:
            continue
        cx, cy, side, angle = found
        for degrees, scale, dx, dy in JITTER[split]:
            out.append((window, (cx + dx * side, cy + dy * side), side * scale,
                        angle + np.radians(degrees)))
    return out


def _feeds(split: str) -> list:
    return [{INPUT: (sample(window, centre, side, angle) / np.float32(255.0))[None]}
            for window, centre, side, angle in crops(split)]


def evaluation() -> list:
    """60 feeds: every third of the 45 face windows of face_detection's evaluation
    split x 4 ROIs."""
    return _feeds("evaluation")


def calibration() -> list:
    """72 feeds: the 24 face windows of its calibration split x 3 ROIs."""
    return _feeds("calibration")
