"""MediaPipe's short-range face detector (BlazeFace): mediapipe/modules/face_detection/
face_detection_short_range.tflite in the `mediapipe` wheel (0.10.14, Apache-2.0), the
file apps ship: TFLite schema 3 from a Keras converter ('keras2tflite_facedetector-
front.tflite.generated'), NO SignatureDef, its 148 operator codes only in the old
`deprecated_builtin_code` field, and its 74 weights in float16 behind DEQUANTIZE ops.
Input `input` [1, 128, 128, 3] float32 RGB in [-1, 1]; outputs `regressors` [1, 896, 16]
(per anchor: box centre offset, width, height, then 6 keypoints, in 128-pixel units) and
`classificators` [1, 896, 1] (logits).

Data: square windows of the photos with a face (scikit-image's astronaut and cameraman,
matplotlib's Grace Hopper portrait) at several sizes and places, and of photos without a
face (scikit-image's cat, coffee, rocket, motorcycle; scikit-learn's china and flower).
Evaluation and calibration use different windows; calibration windows are also mirrored.

Pre-processing, as MediaPipe's face_detection_short_range graph does it on CPU
(ImageToTensorCalculator: 128x128, keep_aspect_ratio, output_tensor_float_range
[-1, 1]): the RGB image resized to 128x128 with bilinear sampling and no antialiasing
(OpenCV's warp; the windows are square, so no letterbox), then x / 127.5 - 1.
Decoding (`detect`), as its TensorsToDetectionsCalculator and SsdAnchorsCalculator:
896 fixed-size anchors (16x16 x 2 at stride 8, 8x8 x 6 at stride 16), score
sigmoid(clip(logit, -100, 100)) >= 0.5, box and keypoints divided by 128 and offset by
the anchor centre; overlapping boxes are merged by weighted NMS (IoU 0.3).
"""
import functools

import numpy as np

from imaging import crop, cv2_resize, photo, window_feeds
from packaged import package_file

SIZE = 128
INPUT = "input"
FACES = ("astronaut", "camera", "grace_hopper")
OTHERS = ("chelsea", "coffee", "rocket", "motorcycle", "china", "flower")
# square windows (cx, cy, side) as fractions of the photo's shorter side, around where
# each photo's face is (the face's centre, found once by the model on the whole photo)
FACE_CENTRE = {"astronaut": (0.44, 0.25), "camera": (0.43, 0.32), "grace_hopper": (0.52, 0.40)}
EVAL_SIDES = (1.0, 0.8, 0.6, 0.45, 0.35)
CALIBRATION_SIDES = (0.9, 0.7, 0.5, 0.4)
EVAL_SHIFTS = ((0.0, 0.0), (0.1, 0.05), (-0.08, 0.1))
CALIBRATION_SHIFTS = ((0.05, -0.05), (-0.1, 0.0))
OTHER_WINDOWS = {"evaluation": ((0.5, 0.5, 1.0), (0.35, 0.4, 0.6), (0.65, 0.6, 0.5),
                                (0.5, 0.3, 0.7)),
                 "calibration": ((0.4, 0.5, 0.8), (0.6, 0.4, 0.55), (0.5, 0.6, 0.65))}


def model_path() -> str:
    return str(package_file("mediapipe", "modules/face_detection/"
                                         "face_detection_short_range.tflite"))


def picture(name: str) -> np.ndarray:
    """RGB uint8: the photos of imaging.photo, or matplotlib's Grace Hopper portrait."""
    if name != "grace_hopper":
        return photo(name)
    return _grace_hopper()


@functools.lru_cache(maxsize=None)
def _grace_hopper() -> np.ndarray:
    from PIL import Image

    from packaged import package_dir
    path = package_dir("matplotlib") / "mpl-data" / "sample_data" / "grace_hopper.jpg"
    image = np.asarray(Image.open(path).convert("RGB"))
    image.flags.writeable = False
    return image


def square(rgb: np.ndarray, cx: float, cy: float, side: float) -> np.ndarray:
    """A square window: centre as fractions of width and height, side as a fraction of
    the shorter side, shifted inside the photo."""
    h, w = rgb.shape[:2]
    s = side * min(h, w)
    return crop(rgb, cx, cy, s / w, s / h)


def preprocess(rgb: np.ndarray) -> np.ndarray:
    """A square RGB uint8 window -> [1, 128, 128, 3] float32 in [-1, 1]."""
    resized = cv2_resize(rgb, (SIZE, SIZE), "linear").astype(np.float32)
    return (resized / np.float32(127.5) - 1)[None]


def windows(split: str) -> list:
    """(name, RGB window) of one split, faces first."""
    out = []
    sides, shifts = ((EVAL_SIDES, EVAL_SHIFTS) if split == "evaluation"
                     else (CALIBRATION_SIDES, CALIBRATION_SHIFTS))
    for name in FACES:
        fx, fy = FACE_CENTRE[name]
        rgb = picture(name)
        h, w = rgb.shape[:2]
        for side in sides:
            for dx, dy in shifts:  # shifts are fractions of the window's side
                cx = fx + dx * side * min(h, w) / w
                cy = fy + dy * side * min(h, w) / h
                out.append((name, square(rgb, cx, cy, side)))
    for name in OTHERS:
        for cx, cy, side in OTHER_WINDOWS[split]:
            out.append((name, square(photo(name), cx, cy, side)))
    return out


def _feeds(split: str, mirror: bool) -> list:
    return window_feeds(windows(split), INPUT, preprocess, mirror)


def evaluation() -> list:
    """69 feeds: 15 windows of each face photo, 4 of each of the six others."""
    return _feeds("evaluation", mirror=False)


def calibration() -> list:
    """84 feeds: 8 other windows of each face photo, 3 of each other photo, each also
    mirrored."""
    return _feeds("calibration", mirror=True)


@functools.lru_cache(maxsize=None)
def anchors() -> np.ndarray:
    """[896, 2] anchor centres (x, y) in [0, 1], in the model's output order."""
    centres = []
    for stride, per_cell in ((8, 2), (16, 6)):
        cells = SIZE // stride
        y, x = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
        grid = np.stack([(x.ravel() + 0.5) / cells, (y.ravel() + 0.5) / cells], axis=1)
        centres.append(np.repeat(grid, per_cell, axis=0))
    return np.concatenate(centres).astype(np.float32)


def detect(regressors: np.ndarray, logits: np.ndarray, threshold: float = 0.5) -> list:
    """Faces as (score, box [x0, y0, x1, y1], keypoints [6, 2]), all in [0, 1] of the
    window, after weighted NMS."""
    raw = regressors.reshape(-1, 16)
    with np.errstate(over="ignore"):  # exp(100) overflows float32: the score is then 0
        scores = 1 / (1 + np.exp(-np.clip(logits.ravel(), -100, 100)))
    keep = np.flatnonzero(scores >= threshold)
    centre = raw[keep, :2] / SIZE + anchors()[keep]
    size = raw[keep, 2:4] / SIZE
    boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=1)
    points = raw[keep, 4:].reshape(-1, 6, 2) / SIZE + anchors()[keep][:, None]
    return _weighted_nms(scores[keep], boxes, points)


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    lo, hi = np.maximum(box[:2], boxes[:, :2]), np.minimum(box[2:], boxes[:, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=1)
    area = lambda b: np.prod(b[..., 2:] - b[..., :2], axis=-1)  # noqa: E731
    return inter / (area(box) + area(boxes) - inter + 1e-9)


def _weighted_nms(scores, boxes, points, iou: float = 0.3) -> list:
    """MediaPipe's WEIGHTED non-max suppression: each cluster's boxes averaged by score."""
    order, faces = np.argsort(-scores), []
    while len(order):
        overlap = _iou(boxes[order[0]], boxes[order]) > iou
        group, order = order[overlap], order[~overlap]
        weights = scores[group][:, None]
        faces.append((float(scores[group[0]]),
                      (boxes[group] * weights).sum(0) / weights.sum(),
                      (points[group] * weights[:, :, None]).sum(0) / weights.sum()))
    return faces


def run(feed: dict) -> tuple:
    """(regressors, classificators) of the FP32 file on one feed, with LiteRT."""
    interpreter = _interpreter()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], feed[INPUT])
    interpreter.invoke()
    by_name = {d["name"]: d["index"] for d in interpreter.get_output_details()}
    return (interpreter.get_tensor(by_name["regressors"]),
            interpreter.get_tensor(by_name["classificators"]))


@functools.lru_cache(maxsize=1)
def _interpreter():
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=model_path(), num_threads=2)
    interpreter.allocate_tensors()
    return interpreter
