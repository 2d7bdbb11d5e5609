"""A real two-rank torch.distributed training script (gloo, on the CPU, each rank probed) that the
multi-rank and discovery tests write to a file and launch.
"""

from __future__ import annotations

import textwrap

# The training script: two ranks, gloo, a small model each, gradients averaged every step. Started by
# torchrun (one process per rank, RANK/LOCAL_RANK/WORLD_SIZE in the environment) or by
# torch.multiprocessing.spawn (LOCAL_RANK set the way torchrun sets it; RANK and WORLD_SIZE left to
# torch.distributed, so the ranks the sidecar shows come from the initialised process group).
DDP_JOB = textwrap.dedent(
    """
    import gc, os, sys, time
    import torch
    import torch._dynamo  # before init_process_group: the teardown below says why
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import probe

    def train(rank, world_size, init_method, stop):
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)
        model = probe.register(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        while True:
            loss = model(torch.randn(8, 16)).pow(2).mean()
            loss.backward()
            for p in model.parameters():  # what DDP does: average the gradients over the ranks
                dist.all_reduce(p.grad)
                p.grad /= world_size
            opt.step()
            opt.zero_grad()
            done = torch.tensor([1.0 if os.path.exists(stop) else 0.0])
            dist.all_reduce(done)  # both ranks leave on the same step
            if done.item() > 0:
                break
            time.sleep(0.05)
        # Both ranks done with their collectives before either tears gloo down, and nothing holding
        # the group when it is destroyed (the optimizer's first step imports torch._dynamo, which
        # keeps references to a group that exists by then: imported above, first): else gloo's
        # threads outlive the teardown and a rank can abort after its last line ("terminate called
        # without an active exception"). torch's, not the probe's: tests/programs/torchrun_ddp.py.
        dist.barrier()
        del model, opt
        gc.collect()
        dist.destroy_process_group()

    def spawned(local_rank, world_size, init_method, stop):
        os.environ["LOCAL_RANK"] = str(local_rank)
        train(local_rank, world_size, init_method, stop)

    if __name__ == "__main__":
        store, stop = sys.argv[1], sys.argv[2]
        if "LOCAL_RANK" in os.environ:  # torchrun: this process is one rank
            train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://", stop)
        else:
            mp.spawn(spawned, args=(2, "file://" + store, stop), nprocs=2, join=True)
    """
)
