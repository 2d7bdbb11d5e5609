"""The pytorch/examples mnist_hogwild pattern, tiny: one registered model in shared memory, trained by
``mp.Process`` children at once. ``python -m tests.helpers.hogwild fork|spawn|forkserver STEPS OUT``
writes the children's pids to OUT (one a line) once they run, then waits for them."""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.multiprocessing as mp

import probe


def train(model: torch.nn.Module, steps: int) -> None:
    torch.manual_seed(os.getpid())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 8), torch.randn(16, 2)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        time.sleep(0.01)


def main() -> int:
    method, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    ctx = mp.get_context(method)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    model.share_memory()
    probe.register(model, name="hogwild")
    procs = [ctx.Process(target=train, args=(model, steps)) for _ in range(2)]
    for p in procs:
        p.start()
    with open(out + ".tmp", "w") as f:
        f.write("".join(f"{p.pid}\n" for p in procs))
    os.replace(out + ".tmp", out)
    for p in procs:
        p.join()
    return max(p.exitcode or 0 for p in procs)


if __name__ == "__main__":
    sys.exit(main())
