"""NudeNet's detector: a YOLOv8n (Ultralytics 8.2.46, exported by torch 2.3.1 to ONNX
opset 17) shipped as nudenet/320n.onnx in the `nudenet` package, 18 body-part classes.
Input `images` [batch, 3, height, width] float32; the package always feeds 1x3x320x320.
Output `output0` [batch, 22, 2100]: per anchor cx, cy, w, h, then 18 class scores.

Data: windows of real photos (scikit-image's astronaut and cameraman, which show people,
and cat, coffee, rocket, motorcycle, scikit-learn's china and flower, which do not).
Evaluation and calibration use different windows; calibration windows are also mirrored.

Pre-processing, as nudenet.nudenet._read_image does it for an image file:
  cv2.imread gives BGR; cv2.cvtColor(COLOR_RGBA2BGR) on a 3-channel image swaps the
  channels (to RGB); pad bottom and right with black to a square; cv2.dnn.blobFromImage
  resizes that to 320x320 (INTER_LINEAR), swaps R and B again (swapRB=True), scales by
  1/255 and makes NCHW. The two swaps cancel: the network receives the file's BGR order.
"""
import itertools

import numpy as np

from imaging import crop, cv2_resize, photo
from packaged import package_file, source_constant

SIZE = 320  # NudeDetector(inference_resolution=320), the model's exported imgsz
INPUT = "images"
PHOTOS = ("astronaut", "camera", "chelsea", "coffee", "rocket", "motorcycle", "china",
          "flower")
PEOPLE = ("astronaut", "camera")
# (cx, cy, width, height) as fractions of the photo
EVAL_WINDOWS = ((0.5, 0.5, 1.0, 1.0), (0.5, 0.5, 0.8, 0.8), (0.4, 0.4, 0.7, 0.6),
                (0.6, 0.6, 0.6, 0.7), (0.4, 0.6, 0.75, 0.5), (0.6, 0.4, 0.5, 0.75),
                (0.45, 0.45, 0.55, 0.55), (0.55, 0.5, 0.9, 0.65))
CALIBRATION_WINDOWS = ((0.5, 0.5, 0.9, 0.9), (0.35, 0.35, 0.65, 0.65),
                       (0.65, 0.65, 0.6, 0.8), (0.5, 0.4, 0.85, 0.55))


def model_path() -> str:
    return str(package_file("nudenet", "320n.onnx"))


def classes() -> list:
    """The 18 class names, in output order, from the package's own code."""
    return source_constant("nudenet", "nudenet.py", "__labels")


def preprocess(bgr: np.ndarray) -> np.ndarray:
    """A BGR uint8 image (as cv2.imread returns it) -> 1x3x320x320 float32."""
    rgb = bgr[..., ::-1]  # cvtColor(COLOR_RGBA2BGR) swaps a 3-channel image's channels
    side = max(rgb.shape[:2])
    square = np.zeros((side, side, 3), np.uint8)  # copyMakeBorder, bottom/right, black
    square[:rgb.shape[0], :rgb.shape[1]] = rgb
    resized = cv2_resize(square, (SIZE, SIZE), "linear")[..., ::-1]  # swapRB=True
    return (resized.astype(np.float32) / 255.0).transpose(2, 0, 1)[None].copy()


def _feeds(windows, mirror: bool) -> list:
    feeds = []
    for name, (cx, cy, w, h) in itertools.product(PHOTOS, windows):
        bgr = crop(photo(name), cx, cy, w, h)[..., ::-1]  # as if read from a file
        for image in ([bgr, bgr[:, ::-1]] if mirror else [bgr]):
            feeds.append({INPUT: preprocess(np.ascontiguousarray(image))})
    return feeds


def evaluation() -> list:
    """64 feeds: 8 windows of each of the 8 photos, in PHOTOS order."""
    return _feeds(EVAL_WINDOWS, mirror=False)


def calibration() -> list:
    """64 feeds: 4 other windows of each photo, each also mirrored."""
    return _feeds(CALIBRATION_WINDOWS, mirror=True)
