"""A Lightning job with plain ``probe.register(lit_module)`` and no callback: training_step and
validation_step both call the module's forward, on batches of different shapes, and training_step
(inside the closure Lightning runs in ``optimizer.step``) takes a while.

``python -m tests.helpers.lightning_plain register|plain [net]``: trains one epoch on the CPU, then
prints one JSON line: the losses, and (registered) the process's published step breakdown and model
entry. With ``net``, training_step calls ``self.net(x)``, as many LightningModules do: the module's
own forward then runs in validation only.
"""

from __future__ import annotations

import json
import os
import sys
import time

import lightning.pytorch as L
import torch

import probe
from probe_wire import read_segment

TRAIN_BATCH, VAL_BATCH, STEPS = 8, 3, 24
STEP_SLEEP_S = 0.03  # inside training_step: forward-and-backward time, never the optimizer's
VAL_SLEEP_S = 0.1  # a validation long enough for the probe's ticks to sample its calls


class Lit(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        self.losses: list[float] = []
        self.via_net = False  # training_step calls self.net(x), not self(x)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x) if self.via_net else self(x), y)
        self.losses.append(loss.item())
        time.sleep(STEP_SLEEP_S)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        time.sleep(VAL_SLEEP_S)
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data(n: int, seed: int) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return torch.utils.data.TensorDataset(x, (x.sum(1) > 0).long())


def main(register: bool, via_net: bool = False) -> None:
    L.seed_everything(0, verbose=False)
    lit = Lit()
    lit.via_net = via_net
    if register:
        probe.register(lit, name="lit-plain")
    trainer = L.Trainer(
        max_epochs=1,
        limit_val_batches=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
    )
    train = torch.utils.data.DataLoader(data(TRAIN_BATCH * STEPS, 0), batch_size=TRAIN_BATCH, shuffle=True)
    val = torch.utils.data.DataLoader(data(VAL_BATCH * 8, 1), batch_size=VAL_BATCH)
    trainer.fit(lit, train, val)
    out: dict = {"losses": lit.losses}
    if register:
        probe.refresh()
        payload = read_segment(os.getpid()).payload
        out["steps"] = payload["steps"]
        out["model"] = next(m for m in payload["models"] if m["name"] == "lit-plain")
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1] == "register", sys.argv[2:] == ["net"])
