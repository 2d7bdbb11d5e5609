"""A plain loop over a DataLoader whose workers are spawned, persistent and pinned, through
``probe.register(model, loader=loader)``. ``--probe`` adds the probe line."""

import argparse
import os

import torch

from tests.helpers import programs


class Squares(torch.utils.data.Dataset):
    """Items made in the worker (module level: spawned workers unpickle it by reference)."""

    def __len__(self):
        return 48

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(8, generator=g)
        return x, (x * x).sum(0, keepdim=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--probe", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    loader = torch.utils.data.DataLoader(
        Squares(), batch_size=8, shuffle=True, num_workers=2,
        multiprocessing_context="spawn", persistent_workers=True, pin_memory=True,
    )
    if args.probe:
        import probe

        probe.register(model, loader=loader)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    calls = 0
    for epoch in range(3):
        for i, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            calls += 1
            loss.backward()
            optimizer.step()
            programs.loss("train", epoch * len(loader) + i, loss.item())
    torch.save(model.state_dict(), os.path.join(args.out, "model.pt"))
    programs.forwards(calls)
