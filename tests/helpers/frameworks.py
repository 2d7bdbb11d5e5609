"""Tiny real trainers (Lightning, Hugging Face Trainer) for the framework tests: CPU, models built from
configs, no downloads, a few dozen steps. Importable by the tests and runnable as a job:

    python -m tests.helpers.frameworks lightning --steps 400 --sleep-s 0.02   # a job for a sidecar
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import torch

import probe


class LabelReport(torch.utils.data.Dataset):
    """Items (x, y, what the serving worker's probe says its loader is): lets a test see, from the
    batches, which label each DataLoader worker published."""

    def __init__(self, n: int = 16) -> None:
        g = torch.Generator().manual_seed(3)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x.sum(1) > 0).long()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        snap = probe.snapshot() or {}
        return self.x[i], self.y[i], f"{snap.get('loader')}|{os.environ.get('FW_USER_INIT')}"


def xy_dataset(n: int = 256) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    return torch.utils.data.TensorDataset(x, (x.sum(1) > 0).long())


class Slow(torch.utils.data.Dataset):
    """``data``, each item ``sleep_s`` late: a loader the training loop waits for."""

    def __init__(self, data, sleep_s: float) -> None:
        self.data = data
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        time.sleep(self.sleep_s)
        return self.data[i]


def lightning_module(sleep_s: float = 0.0):
    import lightning.pytorch as L

    class Lit(L.LightningModule):
        """training_step calls self.net, never self.forward: what the probe alone cannot see."""

        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
            self.losses: list[float] = []
            self.val_labels: list[str] = []

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.losses.append(loss.item())
            if sleep_s:
                time.sleep(sleep_s)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y, labels = batch
            self.val_labels.extend(labels)
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Lit()


def run_lightning(
    callbacks: list,
    *,
    epochs: int = 2,
    max_steps: int = -1,
    workers: int = 1,
    sleep_s: float = 0.0,
    item_sleep_s: float = 0.0,
):
    """Train the tiny LightningModule; returns (module, trainer). Same seed, same data every call.
    ``sleep_s``: each training_step sleeps that long; ``item_sleep_s``: each training item comes late."""
    import lightning.pytorch as L

    L.seed_everything(0, verbose=False)
    data = Slow(xy_dataset(), item_sleep_s) if item_sleep_s else xy_dataset()
    train = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, num_workers=workers)
    val = torch.utils.data.DataLoader(LabelReport(), batch_size=8, num_workers=workers)
    module = lightning_module(sleep_s)
    trainer = L.Trainer(
        max_epochs=epochs,
        max_steps=max_steps,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
    )
    trainer.fit(module, train, val)
    return module, trainer


class TokenDataset(torch.utils.data.Dataset):
    def __init__(self, n: int = 96, seed: int = 1) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, 50, (n, 8), generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int):
        return {"input_ids": self.ids[i], "labels": self.y[i]}


def run_transformers(callbacks: list, *, steps: int = 24, workers: int = 0, eval_steps: int = 8):
    """Train a tiny BERT classifier (built from a config) with the HF Trainer; returns (losses, model)."""
    import transformers

    transformers.logging.set_verbosity_error()

    class Losses(transformers.TrainerCallback):
        def __init__(self) -> None:
            self.losses: list[float] = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    transformers.set_seed(0)
    config = transformers.BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    model = transformers.BertForSequenceClassification(config)
    losses = Losses()
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=8,
            logging_steps=1,
            report_to=[],
            use_cpu=True,
            save_strategy="no",
            eval_strategy="steps",
            eval_steps=eval_steps,
            dataloader_num_workers=workers,
            disable_tqdm=True,
            seed=0,
            log_level="error",
        )
        trainer = transformers.Trainer(
            model=model,
            args=args,
            train_dataset=TokenDataset(),
            eval_dataset=TokenDataset(16, seed=2),
            callbacks=[losses, *callbacks],
        )
        trainer.train()
    return losses.losses, model


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("framework", choices=["lightning"])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--sleep-s", type=float, default=0.02)
    a = ap.parse_args()
    from probe.lightning import ProbeCallback

    module, _ = run_lightning([ProbeCallback()], epochs=1000, max_steps=a.steps, workers=0, sleep_s=a.sleep_s)
    print(f"done {len(module.losses)} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())


def user_worker_init(worker_id: int) -> None:
    """A user's worker_init_fn (module level, so spawn workers can unpickle it): leaves a trace."""
    os.environ["FW_USER_INIT"] = str(worker_id)
