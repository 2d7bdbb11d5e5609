"""A real torch.distributed DDP job (gloo, on the CPU, each rank probed) in which one rank can be
slower than the others, in its DataLoader or in its forward: what the straggler tests launch.

    python straggler_job.py STORE STOP WORLD_SIZE SLOW_RANK MODE SLOW_S

Started so, it starts WORLD_SIZE ranks (torch.multiprocessing, forked: the ranks inherit the imported
torch instead of importing it again, which costs the tests' two cores seconds per rank; how ranks are
launched is not what these tests are about, tests/integration/test_job_key.py is); started by torchrun
(LOCAL_RANK set), it is one rank of torchrun's job (RANK, WORLD_SIZE from the environment; STORE and
WORLD_SIZE unused).

MODE is `data` (the slow rank's dataset sleeps SLOW_S more per batch), `forward` (its model's forward
sleeps SLOW_S more) or `none` (a balanced job). Every rank's dataset sleeps BASE_SLEEP_S per batch,
so the ranks spend little CPU (the tests share two cores) and a step is long enough to measure.
"""

from __future__ import annotations

import textwrap

STRAGGLER_JOB = textwrap.dedent(
    """
    import gc, os, sys, time
    import torch
    import torch._dynamo  # before init_process_group: tests/helpers/gloo_job.py's teardown says why
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel
    import probe

    BASE_SLEEP_S = 0.02

    class Batches(torch.utils.data.Dataset):
        # One whole batch per item (the DataLoader's batch_size=None): one sleep per batch.
        def __init__(self, sleep_s):
            self.sleep_s = sleep_s

        def __len__(self):
            return 1 << 20

        def __getitem__(self, i):
            time.sleep(self.sleep_s)
            return torch.randn(8, 16), torch.randn(8, 4)

    class Net(torch.nn.Module):
        def __init__(self, sleep_s):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
            self.sleep_s = sleep_s

        def forward(self, x):
            if self.sleep_s:
                time.sleep(self.sleep_s)
            return self.body(x)

    def train(rank, world_size, init_method, stop, slow_rank, mode, slow_s):
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)
        extra_s = slow_s if rank == slow_rank else 0.0
        loader = torch.utils.data.DataLoader(
            Batches(BASE_SLEEP_S + (extra_s if mode == "data" else 0.0)), batch_size=None
        )
        net = probe.register(Net(extra_s if mode == "forward" else 0.0), loader=loader)
        model = DistributedDataParallel(net)  # the gradient all-reduce runs inside backward
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for x, y in loader:
            loss = (model(x) - y).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            done = torch.tensor([1.0 if os.path.exists(stop) else 0.0])
            dist.all_reduce(done)  # every rank leaves on the same step
            if done.item() > 0:
                break
        dist.barrier()  # all done with their collectives before any tears gloo down
        del model, net, opt, loader  # nothing holds the group when it is destroyed
        gc.collect()
        dist.destroy_process_group()

    def spawned(local_rank, *args):
        os.environ["LOCAL_RANK"] = str(local_rank)
        train(local_rank, *args)

    if __name__ == "__main__":
        store, stop, world, slow_rank, mode, slow_s = sys.argv[1:7]
        if "LOCAL_RANK" in os.environ:  # torchrun: this process is one rank
            args = (int(os.environ["WORLD_SIZE"]), "env://", stop, int(slow_rank), mode, float(slow_s))
            train(int(os.environ["RANK"]), *args)
        else:
            args = (int(world), "file://" + store, stop, int(slow_rank), mode, float(slow_s))
            mp.start_processes(spawned, args=args, nprocs=int(world), join=True, start_method="fork")
    """
)
