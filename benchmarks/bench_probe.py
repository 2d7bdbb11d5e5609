"""What the probe costs a training loop: a small MLP on CPU, with and without ``probe.register``.

    .venv/bin/python benchmarks/bench_probe.py                 # defaults: 200 rounds of 20 steps
    .venv/bin/python benchmarks/bench_probe.py --json out.json

One model trains in blocks of steps, registered for one block and unregistered for the next (order
alternating AB, BA, ... so slow drift of the machine cancels); the median of the per-round paired
ratios is the overhead. A micro-benchmark on a tiny ``nn.Linear`` gives
the per-forward cost directly, next to an empty forward pre-hook for reference (the part of the
cost that is torch's hook dispatch, not the probe's), and a third measures loader timing per batch.
The probe's publisher thread runs throughout, as it would in training.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import probe  # noqa: E402

# CPU time of the whole process (the probe's publisher thread included) rather than wall time: on a
# shared machine, time spent descheduled is noise many times larger than what is being measured.
CLOCK = time.process_time


def make_mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(256, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )


def train_steps(model, opt, x, y, steps: int) -> float:
    """Seconds per training step (forward, loss, backward, optimizer step) over ``steps`` steps."""
    loss_fn = torch.nn.functional.cross_entropy
    t0 = CLOCK()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return (CLOCK() - t0) / steps


def forwards(model, x, calls: int) -> float:
    """Seconds per forward call of ``model`` over ``calls`` calls (no autograd)."""
    t0 = CLOCK()
    for _ in range(calls):
        model(x)
    return (CLOCK() - t0) / calls


def interleaved(variants: dict, run, rounds: int) -> dict[str, list[float]]:
    names = list(variants)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else list(reversed(names))
        for n in order:
            out[n].append(run(variants[n]))
    return out


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def bench_training(rounds: int, steps: int, batch: int) -> dict:
    """One model, one optimizer: registered for one block of steps, unregistered for the next.

    The same model on both sides keeps memory placement and cache behaviour out of the comparison;
    each round's with/without pair is adjacent in time, so the paired ratios shrug off load drift
    on a shared machine far better than a comparison of overall means.
    """
    x = torch.randn(batch, 256)
    y = torch.randint(0, 10, (batch,))
    model = make_mlp(0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    train_steps(model, opt, x, y, max(50, steps))  # warm-up: allocator, kernels, caches
    calls = 0

    def block(registered: bool) -> float:
        nonlocal calls
        if registered:
            probe.register(model, name="bench-mlp")
        try:
            return train_steps(model, opt, x, y, steps)
        finally:
            if registered:
                snap = probe.snapshot() or {}
                calls += next(m["forward_calls"] for m in snap["models"] if m["name"] == "bench-mlp")
                probe.unregister(model)

    times = interleaved({"without": False, "with": True}, block, rounds)
    ratios = [w / wo for w, wo in zip(times["with"], times["without"])]
    diffs_us = [(w - wo) * 1e6 for w, wo in zip(times["with"], times["without"])]
    r_q1, r_med, r_q3 = quartiles(ratios)
    d_q1, d_med, d_q3 = quartiles(diffs_us)
    # Contention only ever adds time: the fastest round of each is the least disturbed estimate.
    best_without, best_with = min(times["without"]), min(times["with"])
    return {
        "step_us_without": statistics.median(times["without"]) * 1e6,
        "step_us_with": statistics.median(times["with"]) * 1e6,
        "best_step_us_without": best_without * 1e6,
        "best_step_us_with": best_with * 1e6,
        "best_ratio": best_with / best_without,
        "ratio": r_med,
        "ratio_iqr": [r_q1, r_q3],
        "overhead_pct": (r_med - 1) * 100,
        "overhead_us_per_forward": d_med,  # one forward per step
        "overhead_us_per_forward_iqr": [d_q1, d_q3],
        "forward_calls_seen_by_probe": calls,
        "forward_calls_expected": rounds * steps,
    }


def bench_forward(rounds: int, calls: int) -> dict:
    x = torch.randn(4, 8)
    mods = {name: torch.nn.Linear(8, 8) for name in ("none", "empty_hook", "probe")}
    mods["empty_hook"].register_forward_pre_hook(lambda m, a, k: None, with_kwargs=True)
    probe.register(mods["probe"], name="bench-linear")
    with torch.no_grad():
        for m in mods.values():
            forwards(m, x, calls // 5)
        times = interleaved(mods, lambda m: forwards(m, x, calls), rounds)
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    return {
        "forward_us_none": med["none"],
        "forward_us_empty_hook": med["empty_hook"],
        "forward_us_probe": med["probe"],
        "probe_overhead_us": med["probe"] - med["none"],
        "empty_hook_overhead_us": med["empty_hook"] - med["none"],
        "probe_minus_empty_hook_us": med["probe"] - med["empty_hook"],
    }


def bench_loader(rounds: int, batches: int) -> dict:
    data = torch.utils.data.TensorDataset(torch.arange(float(batches * 4)).reshape(-1, 1))
    loaders = {
        "plain": torch.utils.data.DataLoader(data, batch_size=4),
        "timed": torch.utils.data.DataLoader(data, batch_size=4),
    }
    probe.register(torch.nn.Linear(1, 1), name="bench-loader", loader=loaders["timed"])

    def epoch(loader) -> float:
        t0 = CLOCK()
        n = 0
        for _ in loader:
            n += 1
        return (CLOCK() - t0) / n

    for ld in loaders.values():
        epoch(ld)
    times = interleaved(loaders, epoch, rounds)
    plain = statistics.median(times["plain"]) * 1e6
    timed = statistics.median(times["timed"]) * 1e6
    return {"batch_us_plain": plain, "batch_us_timed": timed, "timing_overhead_us_per_batch": timed - plain}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--steps", type=int, default=20, help="training steps per variant per round")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--calls", type=int, default=20000, help="forwards per variant per round (micro)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: steadier figures)")
    ap.add_argument("--wall", action="store_true", help="measure wall time instead of process CPU time")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.wall:
        global CLOCK
        CLOCK = time.perf_counter
    torch.set_num_threads(args.threads)
    if not probe.status()["enabled"] and not probe.activate():
        print(f"the probe is off: {probe.status()['reason']}", file=sys.stderr)
        return 2

    result = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"torch {torch.__version__}, {args.threads} thread(s), {'wall' if args.wall else 'process CPU'} time",
        "training": bench_training(args.rounds, args.steps, args.batch),
        "forward": bench_forward(args.rounds, args.calls),
        "loader": bench_loader(args.rounds, 500),
    }
    tr, fw, ld = result["training"], result["forward"], result["loader"]
    # The micro-benchmark resolves the per-forward cost far better than whole training steps can on
    # a noisy machine: its share of this model's step is the figure to hold against the 1 % target.
    tr["derived_overhead_pct"] = fw["probe_overhead_us"] / tr["step_us_without"] * 100
    print(result["machine"])
    print(
        f"training step, small MLP (256-512-512-10, batch {args.batch}), {args.rounds} rounds x {args.steps} steps"
    )
    print(f"  without probe   {tr['step_us_without']:9.1f} us/step (median of rounds)")
    print(f"  with probe      {tr['step_us_with']:9.1f} us/step")
    print(
        f"  paired ratio    {tr['ratio']:9.4f}  ({tr['overhead_pct']:+.2f} %; interquartile "
        f"{tr['ratio_iqr'][0]:.4f}..{tr['ratio_iqr'][1]:.4f})"
    )
    print(
        f"  per forward     {tr['overhead_us_per_forward']:+9.2f} us  (interquartile "
        f"{tr['overhead_us_per_forward_iqr'][0]:+.1f}..{tr['overhead_us_per_forward_iqr'][1]:+.1f})"
    )
    print(
        f"  forwards counted by the probe: {tr['forward_calls_seen_by_probe']} of {tr['forward_calls_expected']}"
    )
    print(
        f"  fastest rounds  {tr['best_step_us_without']:9.1f} -> {tr['best_step_us_with']:.1f} us/step, "
        f"ratio {tr['best_ratio']:.4f} ({(tr['best_ratio'] - 1) * 100:+.2f} %)"
    )
    print(
        f"  derived         {tr['derived_overhead_pct']:+9.3f} %  (the micro-benchmark's per-forward cost "
        "over this step time)"
    )
    print("forward of nn.Linear(8, 8), per call")
    print(f"  no hook         {fw['forward_us_none']:9.2f} us")
    print(f"  empty pre-hook  {fw['forward_us_empty_hook']:9.2f} us  (+{fw['empty_hook_overhead_us']:.2f})")
    print(
        f"  probe           {fw['forward_us_probe']:9.2f} us  (+{fw['probe_overhead_us']:.2f}; "
        f"{fw['probe_minus_empty_hook_us']:+.2f} over the empty hook)"
    )
    print("DataLoader batch (num_workers=0), per batch")
    print(
        f"  plain {ld['batch_us_plain']:.2f} us, timed {ld['batch_us_timed']:.2f} us "
        f"({ld['timing_overhead_us_per_batch']:+.2f})"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
