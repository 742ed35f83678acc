"""Real photos for calibration and evaluation, from packages (no downloads).

Seven colour photos: scikit-image's chelsea (a cat), coffee, astronaut, rocket and the
stereo motorcycle, and scikit-learn's china and flower sample images. Evaluation crops
(3 scales x 5 centres = 15 per photo, 105 in all) and calibration crops (4 other scales
x 5 other centres, each also mirrored = 40 per photo) never overlap in position, so the
quantizer is not calibrated on the images it is judged on.

Pre-processing as EfficientNet-Lite was trained: RGB in [0, 1], then (x - 0.5) / 0.5.
"""
import itertools

import numpy as np
from PIL import Image

EVAL_SCALES = (0.9, 0.75, 0.6)
EVAL_CENTRES = ((0.5, 0.5), (0.42, 0.42), (0.58, 0.58), (0.42, 0.58), (0.58, 0.42))
CALIBRATION_SCALES = (1.0, 0.82, 0.68, 0.5)
CALIBRATION_CENTRES = ((0.5, 0.5), (0.3, 0.3), (0.7, 0.7), (0.3, 0.7), (0.7, 0.3))


def _photos() -> dict:
    import skimage.data as sk
    from sklearn.datasets import load_sample_images

    photos = {name: getattr(sk, name)() for name in ("chelsea", "coffee", "astronaut", "rocket")}
    photos["motorcycle"] = sk.stereo_motorcycle()[0]
    samples = load_sample_images()
    for filename, image in zip(samples.filenames, samples.images):
        photos[filename.rsplit("/", 1)[-1].split(".")[0]] = image
    return {name: np.ascontiguousarray(image[..., :3]) for name, image in photos.items()}


def _crop(image: np.ndarray, cx: float, cy: float, side: float, size: int = 224) -> np.ndarray:
    """A square crop (side as a fraction of the short edge, centred at cx, cy), resized."""
    height, width = image.shape[:2]
    s = int(round(side * min(height, width)))
    x0 = min(max(0, int(round(cx * width - s / 2))), width - s)
    y0 = min(max(0, int(round(cy * height - s / 2))), height - s)
    patch = Image.fromarray(image[y0:y0 + s, x0:x0 + s]).resize((size, size), Image.BICUBIC)
    return np.asarray(patch)


def _normalise(crops: list) -> np.ndarray:
    x = np.stack(crops).astype(np.float32) / 255.0
    return ((x - 0.5) / 0.5).transpose(0, 3, 1, 2).copy()  # N, 3, 224, 224


def evaluation() -> dict:
    crops = [_crop(image, cx, cy, s) for image in _photos().values()
             for s, (cx, cy) in itertools.product(EVAL_SCALES, EVAL_CENTRES)]
    return {"images": _normalise(crops)}


def calibration() -> dict:
    crops = []
    for image in _photos().values():
        for s, (cx, cy) in itertools.product(CALIBRATION_SCALES, CALIBRATION_CENTRES):
            crop = _crop(image, cx, cy, s)
            crops += [crop, crop[:, ::-1]]
    return {"images": _normalise(crops)}
