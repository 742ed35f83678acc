"""ddddocr's text recognizer: ddddocr/common.onnx in the `ddddocr` package (the model
DdddOcr(beta=True) loads; exported by PyTorch 1.9 to ONNX opset 12). A convolutional
encoder, a bidirectional LSTM (hidden 512) and a linear layer over 8,210 characters,
decoded by CTC with the charset in ddddocr/charsets.py (CHARSET_BETA, index 0 = blank).
Input `input1` [1, 1, 64, image_width] float32: the width stays dynamic, so each feed
has its own width, as the package makes it from each picture's aspect ratio. The graph
declares its output `387` as [1, seqlen] but returns [seqlen, 1, 8210] (seqlen is about
image_width / 8); onnxruntime warns about the mismatch on every call.

Data (each with its true text, for scoring): words photographed in scikit-image's `page`
(a real photo of a printed page; the word boxes below were found once by an ink profile
of each line) and captcha-style pictures rendered by captcha.py. Evaluation uses lines
1, 3 and 5 of the page and one seed of captchas; calibration lines 0, 2 and 4 and
another seed.

Pre-processing, as ddddocr.core.ocr_engine.OCREngine._preprocess_image does it: resize
to height 64 and width int(w * 64 / h) with Pillow's LANCZOS, convert to grey ('L'),
divide by 255, add channel and batch axes.
"""
import numpy as np
from PIL import Image

import captcha
from packaged import load_source, package_file

INPUT = "input1"
HEIGHT = 64
# page(): (top, bottom, text, [(left, right) per word]), rows of one printed line each
PAGE_LINES = (
    (11, 38, "Region-based segmentation", ((7, 141), (151, 291))),
    (47, 64, "Let us first determine markers of the coins and the",
     ((6, 23), (33, 46), (56, 80), (91, 157), (168, 221), (231, 243), (252, 274),
      (284, 316), (325, 347), (357, 375))),
    (64, 82, "background. These markers are pixels that we can label",
     ((6, 81), (88, 127), (134, 187), (192, 214), (221, 258), (264, 291), (298, 315),
      (321, 341), (349, 375))),
    (82, 100, "unambiguously as either object or background. Here,",
     ((7, 101), (106, 124), (133, 172), (181, 222), (232, 245), (254, 334), (345, 375))),
    (99, 118, "the markers are found at the two extreme parts of the",
     ((7, 24), (32, 82), (89, 108), (114, 152), (160, 173), (179, 201), (208, 232),
      (239, 294), (302, 333), (340, 351), (357, 375))),
    (117, 135, "histogram of grey values:", ((7, 66), (73, 85), (90, 118), (124, 169))),
)
EVAL_LINES, CALIBRATION_LINES = (1, 3, 5), (0, 2, 4)
EVAL_SEED, CALIBRATION_SEED = 2024, 7
SAMPLES = 64


def model_path() -> str:
    return str(package_file("ddddocr", "common.onnx"))


def charset() -> list:
    """The 8,210 characters of the model's output classes (ddddocr's CHARSET_BETA)."""
    return load_source("ddddocr", "charsets.py", "_ddddocr_charsets").CHARSET_BETA


def preprocess(image: Image.Image) -> np.ndarray:
    width = int(image.size[0] * (HEIGHT / image.size[1]))
    grey = image.resize((width, HEIGHT), Image.LANCZOS).convert("L")
    return (np.asarray(grey, np.float32) / 255.0)[None, None]


def decode(output: np.ndarray, characters: list) -> str:
    """CTC greedy decoding as OCREngine._process_text_output: argmax per step, merge
    repeats, drop the blank (index 0)."""
    indices = output.reshape(output.shape[0], -1).argmax(axis=-1)  # [seqlen, 1, C]
    kept = [i for k, i in enumerate(indices) if i != 0 and (k == 0 or i != indices[k - 1])]
    return "".join(characters[i] for i in kept)


def _page_words(lines) -> list:
    import skimage.data

    page = skimage.data.page()
    words = []
    for top, bottom, text, spans in (PAGE_LINES[i] for i in lines):
        for word, (left, right) in zip(text.split(), spans):
            window = page[top:bottom, max(0, left - 3):right + 4]
            words.append((Image.fromarray(np.ascontiguousarray(window)), word))
    return words


def samples(split: str) -> list:
    """(picture, true text) pairs: the page's words, then captchas up to SAMPLES."""
    lines, seed = (EVAL_LINES, EVAL_SEED) if split == "evaluation" else \
        (CALIBRATION_LINES, CALIBRATION_SEED)
    pairs = _page_words(lines)
    rng = np.random.default_rng(seed)
    while len(pairs) < SAMPLES:
        image, text, _ = captcha.render(rng)
        pairs.append((image, text))
    return pairs


def evaluation() -> list:
    """64 feeds: 21 page words and 43 captchas; 55 different widths, 67 to 402."""
    return [{INPUT: preprocess(image)} for image, _ in samples("evaluation")]


def calibration() -> list:
    """64 feeds: 22 other page words and 42 other captchas; widths 60 to 348."""
    return [{INPUT: preprocess(image)} for image, _ in samples("calibration")]
