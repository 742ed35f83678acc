"""scikit-learn's digits (1,797 real 8x8 scans), split once with a fixed seed.

Training and calibration use the training split; evaluation uses the held-out 20%.
"""
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def _split():
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]  # N,1,8,8 in [0,1]
    return train_test_split(images, digits.target.astype(np.int64), test_size=0.2,
                            random_state=0, stratify=digits.target)


def train():
    x_train, _, y_train, _ = _split()
    return {"image": x_train, "labels": y_train}


def calibration(samples: int = 256):
    x_train, _, y_train, _ = _split()
    return {"image": x_train[:samples], "labels": y_train[:samples]}


def evaluation():
    _, x_test, _, y_test = _split()
    return {"image": x_test, "labels": y_test}
