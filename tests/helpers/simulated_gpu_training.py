"""A training loop on a simulated GPU, for tests/integration/test_compare_runs.py: a real loop (a
DataLoader and its worker processes, autocast, an optimizer, the probe line) whose GPU work is
simulated by sleeping, on the GPU the simulated driver (tests/fakenvml) lists this process on. Its
training costs next to no CPU (its start, importing torch, about a CPU-second): the time goes to
sleeps, as a GPU job's host waits for its GPU.

The simulated GPU, read through NVML (the same scenario file the sidecar reads):
- a kernel takes FORWARD_S (BACKWARD_S in the backward pass) at the GPU's maximum SM clock, and
  longer as the clock the GPU runs at now drops (max / current, read at each forward): a GPU
  throttled to half its clock runs the kernels twice as long;
- on a GPU with bfloat16 tensor cores (compute capability 8.0 and up), a kernel on bfloat16 tensors
  (the model's output under autocast) takes TENSOR_CORE_SPEEDUP times less than on float32 ones.
The data: decoding an item takes DECODE_S (a sleep, in whichever process loads it: the DataLoader's
workers, which load batches ahead, or with --workers 0 the training process, which then waits).

It waits (up to WAIT_FOR_GPU_S) until the driver lists it on GPU 0, as a CUDA program's process is
listed once it holds a context: the test rewrites the scenario once it knows the pid. Prints
`dsh-program steps PID N` at the end (tests/helpers/programs.py).
"""

import argparse
import os
import time

import pynvml
import torch

from tests.helpers import programs

# In float32 at full clocks; autocast bfloat16 halves them (a step of 150 ms), as the tensor cores
# do. Steps this long keep what the host adds to each (~2 ms of CPU, and its wake-ups: longer, and
# different from run to run, on a loaded machine) to about 1 % of the step.
FORWARD_S = 0.100
BACKWARD_S = 0.200
# Per item: a batch of BATCH_SIZE takes 240 ms to load, longer than a step's kernels (4 workers
# load one each 60 ms, and the step never waits; the training process alone makes each step wait).
DECODE_S = 0.060
BATCH_SIZE = 4
TENSOR_CORE_SPEEDUP = 2.0
WAIT_FOR_GPU_S = 60.0


class SimulatedGpu:
    """GPU 0 of the simulated driver: how long a kernel takes on it now."""

    def __init__(self) -> None:
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        deadline = time.monotonic() + WAIT_FOR_GPU_S
        while not any(p.pid == os.getpid() for p in pynvml.nvmlDeviceGetComputeRunningProcesses(self.handle)):
            if time.monotonic() > deadline:
                raise SystemExit("the simulated driver never listed this process on GPU 0")
            time.sleep(0.05)
        major, _ = pynvml.nvmlDeviceGetCudaComputeCapability(self.handle)
        self.bf16_tensor_cores = major >= 8
        self.max_clock_mhz = pynvml.nvmlDeviceGetMaxClockInfo(self.handle, pynvml.NVML_CLOCK_SM)

    def slowdown(self, dtype: torch.dtype) -> float:
        clock_mhz = pynvml.nvmlDeviceGetClockInfo(self.handle, pynvml.NVML_CLOCK_SM)
        speedup = TENSOR_CORE_SPEEDUP if dtype == torch.bfloat16 and self.bf16_tensor_cores else 1.0
        return self.max_clock_mhz / max(1, clock_mhz) / speedup


class Kernels(torch.autograd.Function):
    """The layer's kernels on the simulated GPU: the forward's and the backward's time, slept."""

    @staticmethod
    def forward(ctx, x, forward_s, backward_s):
        ctx.backward_s = backward_s
        time.sleep(forward_s)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.backward_s)
        return grad, None, None


class Net(torch.nn.Module):
    def __init__(self, gpu: SimulatedGpu) -> None:
        super().__init__()
        self.gpu = gpu
        self.first = torch.nn.Linear(8, 16)
        self.last = torch.nn.Linear(16, 1)

    def forward(self, x):
        h = self.first(x)
        slowdown = self.gpu.slowdown(h.dtype)
        h = Kernels.apply(h, FORWARD_S * slowdown, BACKWARD_S * slowdown)
        return self.last(torch.relu(h))


class Decoded(torch.utils.data.Dataset):
    """Items whose decoding takes DECODE_S each (module level: workers unpickle it by reference)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        time.sleep(DECODE_S)
        x = torch.randn(8, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + i))
        return x, x.sum(0, keepdim=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--seconds", type=float, required=True, help="how long to train")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gpu = SimulatedGpu()
    model = Net(gpu)
    loader = torch.utils.data.DataLoader(
        Decoded(args.seed),
        batch_size=BATCH_SIZE,
        shuffle=True,
        generator=torch.Generator().manual_seed(args.seed),
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    import probe

    probe.register(model, loader=loader)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    deadline = time.monotonic() + args.seconds
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        loss.backward()
        optimizer.step()
        steps += 1
        if time.monotonic() >= deadline:
            break
    programs.say("steps", os.getpid(), steps)


if __name__ == "__main__":
    main()
