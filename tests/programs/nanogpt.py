"""karpathy/nanoGPT's train.py and model.py, in their shape and tiny: a GPT (token and position
embeddings, pre-LayerNorm blocks of causal self-attention and MLP, weight-tied head) built from a
GPTConfig, ``probe.register(model)`` where the model is made, then ``model = torch.compile(model)``
when compile is on; batches drawn at random from a generated token stream, AdamW with weight decay on
the matrices only, gradient clipping, and estimate_loss() every eval_interval. ``--probe`` adds the
probe line; ``--compile`` is nanoGPT's compile=True (``--backend``: inductor unless told)."""

import argparse
import math
import os
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from tests.helpers import programs

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--probe", action="store_true")
parser.add_argument("--compile", action="store_true")
parser.add_argument("--backend", default="inductor", help="torch.compile's backend (nanoGPT: the default)")
parser.add_argument("--max-iters", type=int, default=12)
args = parser.parse_args()
torch.set_num_threads(1)
eval_interval, eval_iters, batch_size, block_size, grad_clip = 6, 2, 4, 16, 1.0


@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 64
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 16
    dropout: float = 0.0
    bias: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(config.n_embd), CausalSelfAttention(config)
        self.ln_2, self.mlp = nn.LayerNorm(config.n_embd), MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)


torch.manual_seed(1337)
data = torch.randint(0, 64, (2000,), generator=torch.Generator().manual_seed(0))
split = {"train": data[:1600], "val": data[1600:]}


def get_batch(name):
    d = split[name]
    ix = torch.randint(len(d) - block_size, (batch_size,))
    x = torch.stack([d[i : i + block_size] for i in ix])
    y = torch.stack([d[i + 1 : i + 1 + block_size] for i in ix])
    return x, y


model = GPT(GPTConfig())
if args.probe:
    import probe

    probe.register(model)
optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95))
raw_model = model
if args.compile:
    model = torch.compile(model, backend=args.backend)  # requires PyTorch 2.0
calls = 0


@torch.no_grad()
def estimate_loss():
    global calls
    out = {}
    model.eval()
    for name in ("train", "val"):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            _, loss = model(*get_batch(name))
            calls += 1
            losses[k] = loss.item()
        out[name] = losses.mean()
    model.train()
    return out


for iter_num in range(args.max_iters + 1):
    if iter_num % eval_interval == 0:
        losses = estimate_loss()
        programs.loss("val", iter_num, losses["val"].item())
    if iter_num == args.max_iters:
        break
    X, Y = get_batch("train")
    _, loss = model(X, Y)
    calls += 1
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    programs.loss("train", iter_num, loss.item())
torch.save({"model": raw_model.state_dict(), "iter_num": iter_num}, os.path.join(args.out, "ckpt.pt"))
programs.forwards(calls)
