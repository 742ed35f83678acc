"""A CNN for 28x28 MNIST digits, wide enough that pruning shows in latency (36M MACs)."""
import torch
from torch import nn


def _block(cin: int, cout: int) -> list:
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]


class MnistCNN(nn.Module):
    def __init__(self, width: int = 32):
        super().__init__()
        self.features = nn.Sequential(
            *_block(1, width), *_block(width, 2 * width), nn.MaxPool2d(2),
            *_block(2 * width, 4 * width), nn.MaxPool2d(2),
            *_block(4 * width, 4 * width), nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Linear(4 * width, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(image), 1))


def build(width: int = 32) -> MnistCNN:
    return MnistCNN(width)
