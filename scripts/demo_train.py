#!/usr/bin/env python3
"""A small real training job for the demo: an MLP on synthetic data, fed by a DataLoader with
worker processes, on whatever device is available (CUDA, then Apple MPS, then the CPU).

    python scripts/demo_train.py [--minutes 10] [--device auto|cpu|cuda] [--workers 2]

It adds exactly what a user adds to their own script: `import probe` and `probe.register(...)`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

# From a checkout without installing:
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import probe


class Spirals(Dataset):
    """Two interleaved spirals with noise: a task an MLP learns in a few epochs."""

    def __init__(self, n: int = 20000, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        t = torch.rand(n, generator=g) * 4 * torch.pi
        label = torch.randint(0, 2, (n,), generator=g)
        sign = label * 2 - 1
        x = torch.stack([t * torch.cos(t) * sign, t * torch.sin(t) * sign], 1) / 10
        self.x = x + 0.05 * torch.randn(x.shape, generator=g)
        self.y = label

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def pick_device(choice: str) -> torch.device:
    if choice != "auto":
        return torch.device(choice)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def ignore_ctrl_c(_worker_id: int) -> None:
    """A terminal's Ctrl-C reaches the DataLoader workers too: they leave stopping to the main
    process, which ends them once its loop is done (a worker gone first fails the loop)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="how long to train (default 10)")
    ap.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:1, mps")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (default 2)")
    ap.add_argument("--batch-size", type=int, default=256)
    args = ap.parse_args()

    device = pick_device(args.device)
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build"
    print(f"demo_train: torch {torch.__version__} ({build}); training on {device}", flush=True)

    model = nn.Sequential(nn.Linear(2, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 2)).to(device)
    loader = DataLoader(
        Spirals(),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        worker_init_fn=ignore_ctrl_c,
        pin_memory=device.type == "cuda",
    )
    probe.register(model, name="spiral-mlp", loader=loader)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()

    # Ctrl-C (or dsh-sidecar passing it on) ends training after the batch in hand. A
    # KeyboardInterrupt raised while a batch is being handed over from a worker leaves that worker
    # printing a traceback of its file-descriptor sharing (multiprocessing.resource_sharer).
    interrupted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: interrupted.append(signum))
    probe.event("start")
    deadline = time.monotonic() + args.minutes * 60
    epoch = 0
    while time.monotonic() < deadline and not interrupted:
        epoch += 1
        total, correct, loss_sum = 0, 0, 0.0
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            logits = model(x)
            loss = loss_fn(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            total += len(y)
            if time.monotonic() >= deadline or interrupted:
                break
        print(f"demo_train: epoch {epoch}: loss {loss_sum / total:.3f}, accuracy {correct / total:.1%}", flush=True)
        probe.event(f"epoch {epoch}")
    if interrupted:
        print("demo_train: interrupted", flush=True)
    probe.event("end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
