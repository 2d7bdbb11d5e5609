"""A torchrun DDP script, tiny: launched by ``python -m torch.distributed.run --nproc-per-node 2``,
each rank joins the gloo group from the environment, wraps its model in DistributedDataParallel,
trains over a DistributedSampler, and rank 0 saves the checkpoint. ``--probe`` adds the probe line."""

import argparse
import os

import torch
import torch.distributed as dist

from tests.helpers import programs

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--probe", action="store_true")
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()
torch.set_num_threads(1)

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
)
if args.probe:
    import probe

    probe.register(model)
g = torch.Generator().manual_seed(5)
data = torch.utils.data.TensorDataset(torch.randn(64, 16, generator=g), torch.randint(0, 4, (64,), generator=g))
sampler = torch.utils.data.distributed.DistributedSampler(data)
loader = torch.utils.data.DataLoader(data, batch_size=8, sampler=sampler)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
calls = 0
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        calls += 1
        loss.backward()
        optimizer.step()
        programs.loss(f"rank{rank}", epoch * len(loader) + i, loss.item())
if rank == 0:
    torch.save(model.module.state_dict(), os.path.join(args.out, "model.pt"))
programs.forwards(calls)
dist.barrier()  # both ranks done before either tears gloo down (see tests/integration/test_multirank.py)
dist.destroy_process_group()
