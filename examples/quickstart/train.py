"""Train the quickstart CNN on the digits training split (a few seconds on 2 cores).

    python examples/quickstart/train.py [--out examples/quickstart/digits_cnn.pt]
"""
import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from data import evaluation, train  # noqa: E402
from model import build  # noqa: E402


def fit(epochs: int = 12, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    data = train()
    x, y = torch.from_numpy(data["image"]), torch.from_numpy(data["labels"])
    model = build()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        for batch in torch.randperm(len(x), generator=generator).split(64):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
        schedule.step()
    return model.eval()


def accuracy(model: torch.nn.Module) -> float:
    data = evaluation()
    with torch.no_grad():
        predicted = model(torch.from_numpy(data["image"])).argmax(1).numpy()
    return float(np.mean(predicted == data["labels"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "digits_cnn.pt"))
    parser.add_argument("--epochs", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    start = time.perf_counter()
    model = fit(args.epochs)
    tmp = args.out + ".tmp"
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, args.out)  # never leave a half-written checkpoint behind
    print(f"trained in {time.perf_counter() - start:.1f}s; held-out accuracy "
          f"{accuracy(model):.4f}; saved {args.out}")


if __name__ == "__main__":
    main()
