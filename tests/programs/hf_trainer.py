"""A Hugging Face Trainer run, tiny and offline: a GPT-2 language model built from a config, trained
on generated token sequences with evaluation every few steps. The Trainer subclass prints each
training loss and counts the forwards (training and evaluation both go through compute_loss).
``--probe`` adds the probe line: probe.transformers.ProbeCallback in the Trainer's callbacks."""

import argparse
import os

import torch
import transformers

from tests.helpers import programs

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--probe", action="store_true")
parser.add_argument("--steps", type=int, default=12)
args = parser.parse_args()
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        self.ids = torch.randint(0, 64, (n, 16), generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class CountingTrainer(transformers.Trainer):
    calls = 0

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        out = super().compute_loss(model, inputs, return_outputs=return_outputs, **kwargs)
        CountingTrainer.calls += 1
        if model.training:
            loss = out[0] if return_outputs else out
            programs.loss("train", self.state.global_step, loss.item())
        return out


transformers.set_seed(0)
config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
model = transformers.GPT2LMHeadModel(config)
callbacks = []
if args.probe:
    from probe.transformers import ProbeCallback

    callbacks.append(ProbeCallback())
training_args = transformers.TrainingArguments(
    output_dir=os.path.join(args.out, "trainer"),
    max_steps=args.steps,
    per_device_train_batch_size=4,
    per_device_eval_batch_size=4,
    eval_strategy="steps",
    eval_steps=6,
    save_strategy="no",
    report_to=[],
    use_cpu=True,
    disable_tqdm=True,
    seed=0,
    log_level="error",
)
trainer = CountingTrainer(
    model=model, args=training_args, train_dataset=Tokens(64, 1), eval_dataset=Tokens(8, 2), callbacks=callbacks
)
trainer.train()
torch.save(model.state_dict(), os.path.join(args.out, "model.pt"))
programs.forwards(CountingTrainer.calls)
