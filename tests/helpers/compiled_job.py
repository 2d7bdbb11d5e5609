"""A training loop in nanoGPT's order: ``probe.register(model)``, then ``torch.compile``.

``python -m tests.helpers.compiled_job MODE BACKEND CALLS``: MODE ``whole`` compiles the registered
model itself, ``inlined`` registers a block and compiles its parent. It runs CALLS training steps
(forever when CALLS is 0), then prints one JSON line: whether dynamo was imported when the model
was registered, the registered model's published entry, and the losses with the probe.
"""

from __future__ import annotations

import json
import os
import sys

import torch

import probe
from probe_wire import read_segment


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.nn.functional.gelu(self.lin(x)) + x


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.block(x))


def main(mode: str, backend: str, calls: int) -> None:
    torch.manual_seed(0)
    model = Net()
    dynamo_before = "torch._dynamo" in sys.modules
    probe.register(model if mode == "whole" else model.block, name="compiled-job")
    model = torch.compile(model, backend=backend, fullgraph=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    losses = []
    step = 0
    while calls == 0 or step < calls:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        step += 1
    probe.refresh()
    payload = read_segment(os.getpid()).payload
    entry = next(m for m in payload["models"] if m["name"] == "compiled-job")
    print(json.dumps({"dynamo_before": dynamo_before, "model": entry, "losses": losses}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
