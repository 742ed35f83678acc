"""ddddocr's character detector: ddddocr/common_det.onnx in the `ddddocr` package (the
model DdddOcr(det=True) loads; exported by PyTorch 1.9 to ONNX opset 11). A YOLOX-style
single-class detector for click-captchas. Input `images` [1, 3, 416, 416] float32 BGR
in 0..255 (not normalised); output `output` [1, 3549, 6]: per anchor of the 52x52,
26x26 and 13x13 grids, raw (dx, dy, log w, log h), objectness and class score.

Data: click-captchas rendered by captcha.render_click (3 to 5 letters and digits over a
real photo, sizes 300..420 x 200..344, with the true box of every character), and real
photos of text from scikit-image: `page` and `text`. Evaluation: one seed of captchas,
the page's upper half and the left half of `text`; calibration: another seed, the
page's lower half and the right half of `text`.

Pre-processing, as ddddocr.core.detection_engine.DetectionEngine.get_bbox does it: the
picture decoded by cv2.imdecode (BGR); `preproc`: scale by r = min(416 / h, 416 / w),
cv2.resize INTER_LINEAR, top-left into a 416x416 canvas of grey 114, HWC -> CHW, float32.
"""
import numpy as np

import captcha
from imaging import cv2_resize, photo
from packaged import package_file

INPUT = "images"
SIZE = 416
EVAL_SEED, CALIBRATION_SEED = 99, 5
EVAL_CAPTCHAS, CALIBRATION_CAPTCHAS = 46, 62


def model_path() -> str:
    return str(package_file("ddddocr", "common_det.onnx"))


def preprocess(bgr: np.ndarray) -> tuple:
    """A BGR uint8 picture -> (1x3x416x416 float32, scale r) as DetectionEngine.preproc."""
    r = min(SIZE / bgr.shape[0], SIZE / bgr.shape[1])
    resized = cv2_resize(bgr, (int(bgr.shape[1] * r), int(bgr.shape[0] * r)), "linear")
    canvas = np.full((SIZE, SIZE, 3), 114, np.uint8)
    canvas[:resized.shape[0], :resized.shape[1]] = resized
    return canvas.transpose(2, 0, 1).astype(np.float32)[None], r


def detect(output: np.ndarray, r: float, score: float = 0.1, iou: float = 0.45) -> list:
    """Boxes (x0, y0, x1, y1) in picture pixels, as get_bbox: YOLOX grid decoding,
    score = objectness x class, threshold 0.1, NMS at IoU 0.45."""
    grids, strides = [], []
    for stride in (8, 16, 32):
        n = SIZE // stride
        xv, yv = np.meshgrid(np.arange(n), np.arange(n))
        grids.append(np.stack((xv, yv), 2).reshape(-1, 2))
        strides.append(np.full((n * n, 1), stride))
    grid, stride = np.concatenate(grids), np.concatenate(strides)
    pred = output[0].astype(np.float64)
    centre, size = (pred[:, :2] + grid) * stride, np.exp(pred[:, 2:4]) * stride
    boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=1) / r
    scores = pred[:, 4] * pred[:, 5]
    keep = np.flatnonzero(scores > score)
    return [tuple(boxes[i]) for i in _nms(boxes[keep], scores[keep], iou, keep)]


def _nms(boxes, scores, threshold, index) -> list:
    order, kept = list(np.argsort(-scores)), []
    while order:
        best = order.pop(0)
        kept.append(index[best])
        order = [i for i in order if box_iou(boxes[best], boxes[i]) <= threshold]
    return kept


def box_iou(a, b) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union if union > 0 else 0.0


def samples(split: str) -> list:
    """(RGB picture, true character boxes or None for the text photos) pairs."""
    evaluation = split == "evaluation"
    rng = np.random.default_rng(EVAL_SEED if evaluation else CALIBRATION_SEED)
    pairs = []
    for _ in range(EVAL_CAPTCHAS if evaluation else CALIBRATION_CAPTCHAS):
        size = (int(rng.integers(300, 421)), int(rng.integers(200, 345)))
        image, _, boxes = captcha.render_click(rng, size)
        pairs.append((np.asarray(image), boxes))
    page, text = photo("page"), photo("text")
    half_page = page.shape[0] // 2
    if evaluation:
        pairs += [(page[:half_page], None), (text[:, :text.shape[1] // 2], None)]
    else:
        pairs += [(page[half_page:], None), (text[:, text.shape[1] // 2:], None)]
    return pairs


def _feeds(split: str) -> list:
    return [{INPUT: preprocess(np.ascontiguousarray(rgb[..., ::-1]))[0]}
            for rgb, _ in samples(split)]


def evaluation() -> list:
    """48 feeds: 46 click-captchas, the upper half of `page`, the left half of `text`."""
    return _feeds("evaluation")


def calibration() -> list:
    """64 feeds: 62 other click-captchas and the other halves of the two text photos."""
    return _feeds("calibration")
