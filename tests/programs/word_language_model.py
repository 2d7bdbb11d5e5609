"""pytorch/examples word_language_model, in its shape and tiny: an LSTM language model over a
generated corpus, batchified and cut into bptt chunks, the hidden state repackaged between chunks,
gradients clipped and applied by hand (p.data.add_(p.grad, alpha=-lr)), evaluated after each epoch,
the learning rate annealed when validation does not improve. ``--probe`` adds the probe line."""

import argparse
import os

import torch
import torch.nn as nn

from tests.helpers import programs

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--probe", action="store_true")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--bptt", type=int, default=8)
parser.add_argument("--lr", type=float, default=20.0)
parser.add_argument("--clip", type=float, default=0.25)
args = parser.parse_args()
torch.manual_seed(1111)
torch.set_num_threads(1)
NTOKENS = 50


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        return nn.functional.log_softmax(self.decoder(self.drop(output)), dim=-1).view(-1, self.decoder.out_features), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


def get_batch(source, i):
    seq_len = min(args.bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].view(-1)


def repackage_hidden(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


g = torch.Generator().manual_seed(0)
train_data = batchify(torch.randint(0, NTOKENS, (800,), generator=g), 4)
val_data = batchify(torch.randint(0, NTOKENS, (200,), generator=g), 2)
model = RNNModel(NTOKENS, 16, 16, 2)
if args.probe:
    import probe

    probe.register(model)
criterion = nn.NLLLoss()
calls = 0


def evaluate(data_source, bsz):
    global calls
    model.eval()
    total = 0.0
    hidden = model.init_hidden(bsz)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, args.bptt):
            data, targets = get_batch(data_source, i)
            output, hidden = model(data, hidden)
            calls += 1
            hidden = repackage_hidden(hidden)
            total += len(data) * criterion(output, targets).item()
    return total / (len(data_source) - 1)


def train(epoch, lr):
    global calls
    model.train()
    hidden = model.init_hidden(4)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        data, targets = get_batch(train_data, i)
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        calls += 1
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        programs.loss("train", epoch * 1000 + batch, loss.item())


lr, best_val_loss = args.lr, None
for epoch in range(args.epochs):
    train(epoch, lr)
    val_loss = evaluate(val_data, 2)
    programs.loss("val", epoch, val_loss)
    if best_val_loss is None or val_loss < best_val_loss:
        torch.save(model.state_dict(), os.path.join(args.out, "model.pt"))
        best_val_loss = val_loss
    else:
        lr /= 4.0
programs.forwards(calls)
