"""Real images and fonts from installed packages, and OpenCV's resize without OpenCV.

Photos: the pictures bundled inside scikit-image (only files in skimage/data, none that
it would download) and scikit-learn's two sample images. Fonts: TrueType fonts bundled
inside matplotlib (DejaVu, STIX, Computer Modern), which the `examples` extra installs
through mlxtend.

The packages under test resize with OpenCV (cv2.resize, cv2.dnn.blobFromImage), which is
not installed here. OpenCV's INTER_LINEAR and INTER_LANCZOS4 do NOT antialias when they
shrink an image, unlike Pillow's filters, so Pillow would feed the models smoother
pictures than the packages do. `cv2_resize` re-implements OpenCV's sampling: source
coordinate (x + 0.5) * scale - 0.5, the same kernels, border pixels replicated. OpenCV
rounds fixed-point weights for uint8 images, so results can differ by 1 grey level.
"""
import functools

import numpy as np

from packaged import package_dir

FONTS = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf",
         "DejaVuSerif-BoldItalic.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Oblique.ttf",
         "cmr10.ttf", "cmss10.ttf", "cmtt10.ttf", "STIXGeneral.ttf", "STIXGeneralBol.ttf",
         "DejaVuSansMono-Bold.ttf")


@functools.lru_cache(maxsize=None)
def photo(name: str) -> np.ndarray:
    """One photo as RGB uint8 (H, W, 3), read-only: a skimage.data name, 'motorcycle',
    or a scikit-learn sample ('china', 'flower')."""
    if name in ("china", "flower"):
        from sklearn.datasets import load_sample_image

        image = load_sample_image(f"{name}.jpg")
    else:
        import skimage.data as sk

        image = sk.stereo_motorcycle()[0] if name == "motorcycle" else getattr(sk, name)()
    if image.dtype == bool:  # horse is a boolean silhouette
        image = image.astype(np.uint8) * 255
    if image.ndim == 2:  # grey photos (camera, page, text) as three equal channels
        image = np.repeat(image[..., None], 3, axis=2)
    image = np.ascontiguousarray(image[..., :3])
    image.flags.writeable = False  # cached and shared: callers copy before changing it
    return image


@functools.lru_cache(maxsize=None)
def fonts() -> tuple:
    """Paths of the FONTS bundled with matplotlib. Required, not replaced by whatever
    the system has: another set of fonts would render other pictures."""
    folder = package_dir("matplotlib") / "mpl-data" / "fonts" / "ttf"
    missing = [n for n in FONTS if not (folder / n).is_file()]
    if missing:
        raise RuntimeError(f"matplotlib's bundled fonts {missing} are missing from {folder}")
    return tuple(str(folder / n) for n in FONTS)


def _kernel_weights(n_in: int, n_out: int, method: str) -> np.ndarray:
    """(n_out, n_in) matrix of OpenCV's resampling weights along one axis."""
    scale = n_in / n_out
    fx = (np.arange(n_out) + 0.5) * scale - 0.5
    sx = np.floor(fx).astype(int)
    frac = fx - sx
    if method == "linear":
        taps = np.arange(0, 2)
        w = np.stack([1 - frac, frac], axis=1)
    else:  # lanczos4: sinc(d) * sinc(d / 4) over 8 taps, normalised to sum 1
        taps = np.arange(-3, 5)
        d = frac[:, None] - taps[None, :]
        w = np.sinc(d) * np.sinc(d / 4)
        w /= w.sum(axis=1, keepdims=True)
    index = np.clip(sx[:, None] + taps[None, :], 0, n_in - 1)  # BORDER_REPLICATE
    matrix = np.zeros((n_out, n_in))
    np.add.at(matrix, (np.repeat(np.arange(n_out), len(taps)), index.ravel()), w.ravel())
    return matrix


def cv2_resize(image: np.ndarray, size: tuple, method: str = "linear") -> np.ndarray:
    """cv2.resize(image, (width, height), interpolation=INTER_LINEAR or INTER_LANCZOS4)
    for a uint8 (H, W) or (H, W, C) image; returns uint8 like OpenCV."""
    width, height = size
    wy = _kernel_weights(image.shape[0], height, method).astype(np.float32)
    wx = _kernel_weights(image.shape[1], width, method).astype(np.float32)
    planes = np.atleast_3d(image).transpose(2, 0, 1).astype(np.float32)  # C, H, W
    out = (wy @ planes @ wx.T).transpose(1, 2, 0)  # height, width, C
    out = out[..., 0] if image.ndim == 2 else out
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def crop(image: np.ndarray, cx: float, cy: float, width: float, height: float) -> np.ndarray:
    """A window of the image: centre (cx, cy) and size as fractions of the image's
    width and height, shifted inside the image."""
    h, w = image.shape[:2]
    cw, ch = max(1, int(round(width * w))), max(1, int(round(height * h)))
    x0 = min(max(0, int(round(cx * w - cw / 2))), w - cw)
    y0 = min(max(0, int(round(cy * h - ch / 2))), h - ch)
    return np.ascontiguousarray(image[y0:y0 + ch, x0:x0 + cw])


def window_feeds(windows: list, name: str, preprocess, mirror: bool) -> list:
    """One feed {name: preprocess(image)} per (label, image) window, each also mirrored
    left to right where `mirror` (calibration: twice the views of the same photos)."""
    feeds = []
    for _, rgb in windows:
        for image in ([rgb, rgb[:, ::-1]] if mirror else [rgb]):
            feeds.append({name: preprocess(np.ascontiguousarray(image))})
    return feeds
