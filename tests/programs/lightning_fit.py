"""A Lightning fit, tiny: a LightningModule whose training_step and validation_step call self(x),
trained for two epochs with a validation loader of another batch size. ``--probe`` adds the probe
line: ``probe.register(model)``, or with ``--callback`` probe.lightning.ProbeCallback in the
Trainer's callbacks."""

import argparse
import os

import lightning.pytorch as L
import torch

from tests.helpers import programs

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--probe", action="store_true")
parser.add_argument("--callback", action="store_true")
args = parser.parse_args()
torch.set_num_threads(1)
TRAIN_BATCH, VAL_BATCH = 8, 4


class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        programs.loss("train", self.global_step, loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return torch.utils.data.TensorDataset(x, (x.sum(1) > 0).long())


L.seed_everything(0, verbose=False)
model = Lit()
callbacks = []
if args.probe and args.callback:
    from probe.lightning import ProbeCallback

    callbacks.append(ProbeCallback())
elif args.probe:
    import probe

    probe.register(model)
trainer = L.Trainer(
    max_epochs=2, callbacks=callbacks, accelerator="cpu", devices=1, logger=False,
    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
)
trainer.fit(
    model,
    torch.utils.data.DataLoader(data(64, 1), batch_size=TRAIN_BATCH, shuffle=True),
    torch.utils.data.DataLoader(data(16, 2), batch_size=VAL_BATCH),
)
torch.save(model.state_dict(), os.path.join(args.out, "model.pt"))
programs.forwards(model.calls)
