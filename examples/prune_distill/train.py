"""Train the dense MNIST CNN that the prune + distill pipeline starts from.

    python examples/prune_distill/train.py [--epochs 6]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "mnist_cnn.pt"))
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    data = train()
    x, y = torch.from_numpy(data["image"]), torch.from_numpy(data["labels"])
    model = build()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=4e-3, total_steps=args.epochs * ((len(x) + 63) // 64))
    start = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        for batch in torch.randperm(len(x)).split(64):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
            schedule.step()
        print(f"epoch {epoch + 1}/{args.epochs} ({time.perf_counter() - start:.0f} s)", flush=True)
    model.eval()
    held_out = evaluation()
    with torch.no_grad():
        predicted = model(torch.from_numpy(held_out["image"])).argmax(1).numpy()
    tmp = args.out + ".tmp"
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, args.out)
    print(f"held-out accuracy {np.mean(predicted == held_out['labels']):.4f}; saved {args.out}")


if __name__ == "__main__":
    main()
