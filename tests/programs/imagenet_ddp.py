"""pytorch/examples imagenet/main.py --multiprocessing-distributed, in its shape and tiny: the parent
mp.spawn()s one process per "GPU"; each runs main_worker, which joins the gloo group, wraps the model
in DistributedDataParallel, trains over a DistributedSampler of FakeData-like generated images,
validates, and rank 0 saves the checkpoint. The ranks exit, then the parent. ``--probe`` adds the
probe line (after the model is wrapped, where a user puts it)."""

import argparse
import gc
import os

import torch
import torch._dynamo  # before init_process_group: the teardown in torchrun_ddp.py says why
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.utils.data
import torch.utils.data.distributed

from tests.helpers import programs

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--probe", action="store_true")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("-b", "--batch-size", type=int, default=4)
parser.add_argument("-j", "--workers", type=int, default=1)
parser.add_argument("--world-size", type=int, default=1, help="nodes")
parser.add_argument("--rank", type=int, default=0, help="node rank")
parser.add_argument("--dist-url", default="")


class FakeData(torch.utils.data.Dataset):
    """torchvision's FakeData: item i is a random image and label drawn from a generator seeded by i."""

    def __init__(self, size, offset=0):
        self.size, self.offset = size, offset

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.offset + i)
        return torch.randn(3, 16, 16, generator=g), int(torch.randint(0, 10, (1,), generator=g))


def resnet_tiny():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10),
    )


def main():
    args = parser.parse_args()
    args.dist_url = args.dist_url or "file://" + os.path.join(args.out, "store")
    ngpus_per_node = 2
    args.world_size = ngpus_per_node * args.world_size
    mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))


def main_worker(gpu, ngpus_per_node, args):
    torch.set_num_threads(1)
    args.rank = args.rank * ngpus_per_node + gpu
    dist.init_process_group(backend="gloo", init_method=args.dist_url, world_size=args.world_size, rank=args.rank)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(resnet_tiny())
    if args.probe:
        import probe

        probe.register(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    train_dataset, val_dataset = FakeData(32), FakeData(16, offset=1000)
    train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset)
    val_sampler = torch.utils.data.distributed.DistributedSampler(val_dataset, shuffle=False, drop_last=True)
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=False,
        num_workers=args.workers, pin_memory=True, sampler=train_sampler,
    )
    val_loader = torch.utils.data.DataLoader(
        val_dataset, batch_size=args.batch_size, shuffle=False,
        num_workers=args.workers, pin_memory=True, sampler=val_sampler,
    )
    calls = 0
    for epoch in range(args.epochs):
        train_sampler.set_epoch(epoch)
        calls += train(train_loader, model, criterion, optimizer, epoch, args)
        calls += validate(val_loader, model, criterion, epoch, args)
        scheduler.step()
        if args.rank % ngpus_per_node == 0:
            state = {"epoch": epoch + 1, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save(state, os.path.join(args.out, "checkpoint.pth.tar"))
    programs.forwards(calls)
    dist.barrier()  # both ranks done before either tears gloo down (see tests/integration/test_multirank.py)
    # Nothing may hold the group when it is destroyed, or gloo's threads outlive it into interpreter
    # shutdown and can abort the rank: tests/programs/torchrun_ddp.py's teardown.
    del model, optimizer, scheduler
    gc.collect()
    dist.destroy_process_group()


def train(train_loader, model, criterion, optimizer, epoch, args):
    model.train()
    for i, (images, target) in enumerate(train_loader):
        loss = criterion(model(images), target)
        programs.loss(f"rank{args.rank}", epoch * len(train_loader) + i, loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return len(train_loader)


def validate(val_loader, model, criterion, epoch, args):
    model.eval()
    with torch.no_grad():
        for i, (images, target) in enumerate(val_loader):
            loss = criterion(model(images), target)
            programs.loss(f"val{args.rank}", epoch * len(val_loader) + i, loss.item())
    return len(val_loader)


if __name__ == "__main__":
    main()
