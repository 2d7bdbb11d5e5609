"""An accelerate loop, tiny: Accelerator().prepare(model, optimizer, loader, scheduler), then
accelerator.backward(loss); the probe line after prepare, with the prepared loader (a
DataLoaderShard). ``--probe`` adds the probe line."""

import argparse
import os

import accelerate
import torch

from tests.helpers import programs

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--probe", action="store_true")
args = parser.parse_args()
torch.set_num_threads(1)

accelerator = accelerate.Accelerator(cpu=True)
accelerate.utils.set_seed(0)
g = torch.Generator().manual_seed(3)
data = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 2, (64,), generator=g))
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
scheduler = torch.optim.lr_scheduler.LinearLR(optimizer)
model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
if args.probe:
    import probe

    probe.register(model, loader=loader)
calls = 0
for epoch in range(2):
    model.train()
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        calls += 1
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        programs.loss("train", epoch * len(loader) + i, loss.item())
accelerator.wait_for_everyone()
torch.save(accelerator.unwrap_model(model).state_dict(), os.path.join(args.out, "model.pt"))
programs.forwards(calls)
