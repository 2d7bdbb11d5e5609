"""pytorch/examples mnist_hogwild, in its shape and tiny: spawn start method, one model in shared
memory, ``--num-processes`` mp.Process children each training it over its own shuffled loader, the
parent joining them, saving the state_dict and testing the model. ``--probe`` adds the probe line:
in the parent after share_memory(), and at the start of train(), which spawned children need.

One change from the original: the children take turns, one optimizer step each, so that their
updates of the shared parameters happen in the same order every run (the original races, which makes
its losses differ from run to run, with or without a probe)."""

import argparse
import os

import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from tests.helpers import programs

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--probe", action="store_true")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--num-processes", type=int, default=2)
parser.add_argument("--seed", type=int, default=1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, kernel_size=3)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(4 * 3 * 3, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv1(x)), 2))
        return F.log_softmax(self.fc1(x.flatten(1)), dim=1)


def dataset(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.utils.data.TensorDataset(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g))


def train(rank, args, model, turn, cond):
    if args.probe:
        import probe

        probe.register(model)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed + rank)
    loader = torch.utils.data.DataLoader(dataset(32, 7), batch_size=8, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    model.train()
    calls = 0
    for epoch in range(args.epochs):
        for batch_idx, (data, target) in enumerate(loader):
            with cond:
                cond.wait_for(lambda: turn.value % args.num_processes == rank)
                optimizer.zero_grad()
                output = model(data)
                calls += 1
                loss = F.nll_loss(output, target)
                loss.backward()
                optimizer.step()
                programs.loss(f"child{rank}", epoch * len(loader) + batch_idx, loss.item())
                turn.value += 1
                cond.notify_all()
    programs.forwards(calls)


def test(model):
    model.eval()
    calls, total = 0, 0.0
    with torch.no_grad():
        for data, target in torch.utils.data.DataLoader(dataset(16, 8), batch_size=8):
            total += F.nll_loss(model(data), target, reduction="sum").item()
            calls += 1
    programs.loss("test", 0, total / 16)
    return calls


if __name__ == "__main__":
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    mp.set_start_method("spawn", force=True)
    model = Net()
    model.share_memory()  # gradients are allocated lazily, so they are not shared here
    if args.probe:
        import probe

        probe.register(model)
    turn, cond = mp.Value("i", 0), mp.Condition()
    processes = []
    for rank in range(args.num_processes):
        p = mp.Process(target=train, args=(rank, args, model, turn, cond))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
    torch.save(model.state_dict(), os.path.join(args.out, "MNIST_hogwild.pt"))
    programs.forwards(test(model))
