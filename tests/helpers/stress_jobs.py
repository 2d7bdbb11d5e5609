"""Processes the stress tests and the benchmarks run: writers that publish through the probe's own
`SegmentWriter` (the bytes the probe writes), a real torch job with the real probe, and a busy job
tree for load figures.

    python -m tests.helpers.stress_jobs hot                  # publish VARIANTS as fast as possible, forever
    python -m tests.helpers.stress_jobs paced                # the same with a 2 ms pause after each publish
    python -m tests.helpers.stress_jobs slow                 # ~100 publishes/s, each stalled 4 ms mid-publish
    python -m tests.helpers.stress_jobs once                 # publish variant 0, then sleep
    python -m tests.helpers.stress_jobs wait                 # sleep; publish variant 0 when a line arrives on stdin
    python -m tests.helpers.stress_jobs zygote               # fork writers on command (stdin), reap them
    python -m tests.helpers.stress_jobs busy --children 63 --gpus 8 --out pids.json [--churn-period 0.1]
    python -m tests.helpers.stress_jobs train --out result.json [--stop-file F] [--fill-shm-after 50]

Every payload a writer here publishes is one of `variant(pid, start_ticks, k)`, k < N_VARIANTS, with
sizes from ~1 KB to ~57 KB: a reader that hands out anything else has accepted a torn payload. All
modes leave through SIGTERM (closing their segments); children die with their parent
(PR_SET_PDEATHSIG), so a crashed test leaves no process behind.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

import probe_wire as segment
from hostfs.procid import process_start_ticks
from probe_wire.records import ProbePayload, payload_record
from tests.fakenvml import gpu

GPU_UUIDS = [gpu(i)["uuid"] for i in range(64)]
N_VARIANTS = 16
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Linux: the kernel sends `sig` to this process when its parent exits."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def cuda_runtime(gpus: int = 1) -> dict:
    return {
        "torch": "2.5.1+cu124",
        "cuda_build": "12.4",
        "cudnn": 90100,
        "cuda_available": True,
        "cuda_initialized": True,
        "device_count": gpus,
        "devices": [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "uuid": GPU_UUIDS[i]} for i in range(gpus)],
        "cuda_visible_devices": None,
        "cuda_device_order": None,
        "mps_available": False,
        "xpu_available": False,
    }


def variant(pid: int, start_ticks: int, k: int, name: str = "net") -> dict:
    """Payload number `k` of writer `pid`: valid schema 1, a model on cuda:0, 1..14 models whose
    'class' strings pad the payload to between ~1 KB and ~57 KB, and `published_at` = 1000 + k, which
    names the variant. Deterministic, so a reader can check any payload it accepted."""
    p = segment.empty_payload(pid, start_ticks)
    p["runtime"] = cuda_runtime(1)
    n_models = 1 + (k * 5) % 14
    p["models"] = [
        {
            "name": f"{name}{j}",
            "class": chr(ord("a") + k) * (4000 - j),
            "params": 1000 * (k + 1),
            "device": "cuda:0",
            "devices": ["cuda:0"],
            "input_device": "cuda:0",
            "forward_calls": k,
            "forward_rate_hz": float(k),
            "last_forward_time": 1000.0 + k,
            "data_wait_fraction": None,
            "data_wait_s": None,
            "step_s": None,
        }
        for j in range(n_models)
    ]
    p["events"] = [{"time": 1000.0 + k, "name": f"v{k}"}]
    p["published_at"] = 1000.0 + k
    return p


def variant_of(payload: dict | ProbePayload) -> int | None:
    """The k of a payload built by `variant`, or None when it cannot be one."""
    at = payload.published_at if isinstance(payload, ProbePayload) else payload.get("published_at")
    if not isinstance(at, float) or not 1000.0 <= at < 1000.0 + N_VARIANTS or at != int(at):
        return None
    return int(at) - 1000


def is_exact_variant(payload: dict | ProbePayload, pid: int, start_ticks: int, name: str = "net") -> bool:
    """True when `payload` (as the reader hands it out, or the sidecar's source as its typed record)
    equals one variant exactly."""
    k = variant_of(payload)
    if k is None:
        return False
    expected, reason = segment.validate_payload(variant(pid, start_ticks, k, name))
    if reason is not None or expected is None:
        return False
    return payload == (payload_record(expected) if isinstance(payload, ProbePayload) else expected)


class _Stop(Exception):
    pass


def _on_term(*_: object) -> None:
    raise _Stop()


def _encoded_variants(w: segment.SegmentWriter, name: str = "net") -> list[tuple[bytes, float]]:
    out = []
    for k in range(N_VARIANTS):
        data, _ = segment.encode_payload(variant(w.pid, w.start_ticks, k, name), w.capacity_bytes)
        out.append((data, 1000.0 + k))
    return out


# --------------------------------------------------------------------------------------------------
# Writer modes


def run_hot(name: str = "net", pause_s: float = 0.0) -> None:
    """Publish the variants round-robin as fast as possible: most of the time is spent inside a
    publish (seq odd), so a SIGKILL at a random moment usually lands mid-publish. With `pause_s`
    (the "paced" writer) it sleeps that long after each publish, so readers also find it idle."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    w = segment.SegmentWriter()
    blobs = _encoded_variants(w, name)
    while not stop:
        for data, at in blobs:
            w.publish_bytes(data, False, at)
            if pause_s:
                time.sleep(pause_s)
    w.close()


def run_slow(name: str = "net") -> None:
    """Publish every ~10 ms with the writer's own three steps and a 2 ms stall after the first two
    (seq odd during both), so a test that stops the writer at random finds it mid-publish often."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    w = segment.SegmentWriter()
    blobs = _encoded_variants(w, name)
    while not stop:
        for data, at in blobs:
            w._begin()
            time.sleep(0.002)
            w._fill(data, 0, at)
            time.sleep(0.002)
            w._end()
            time.sleep(0.005)
    w.close()


def run_once(name: str = "net", wait_for_line: bool = False) -> None:
    signal.signal(signal.SIGTERM, _on_term)
    w = None
    try:
        if wait_for_line:
            sys.stdin.readline()
        w = segment.SegmentWriter()
        data, at = _encoded_variants(w, name)[0]
        w.publish_bytes(data, False, at)
        print("published", flush=True)
        while True:
            time.sleep(3600)
    except (_Stop, KeyboardInterrupt):
        pass
    finally:
        if w is not None:
            w.close()


def _child(mode: str) -> None:
    """In a forked child of the zygote: never returns."""
    code = 0
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        die_with_parent()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):
            os.dup2(devnull, fd)
        if mode == "hot":
            run_hot()
        elif mode == "paced":
            run_hot(pause_s=0.002)
        elif mode == "once":
            run_once()
        else:  # idle: a process without a probe
            signal.signal(signal.SIGTERM, _on_term)
            try:
                while True:
                    time.sleep(3600)
            except _Stop:
                pass
    except BaseException:  # noqa: BLE001 -- a forked child must never return into the zygote's loop
        code = 1
    os._exit(code)


def set_next_pid(pid: int) -> None:
    """The next process created in this PID namespace gets `pid` if it is free (root only)."""
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(pid - 1))


def run_zygote() -> None:
    """Reads commands on stdin, answers one line each on stdout:
    `spawn MODE [PID]` forks a writer (hot | paced | once | idle), at PID if given: answers its pid;
    `quit` stops every child with SIGTERM and exits. Children are reaped as soon as they die."""
    # probe_wire imports its modules on first use: import the writer's now, once, so a forked child
    # starts writing at once (as a probe does, whose import happened long before), not after the
    # imports a child killed within milliseconds would never finish.
    segment.SegmentWriter, segment.empty_payload  # noqa: B018
    children: set[int] = set()

    def reap(*_: object) -> None:
        while True:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)

    signal.signal(signal.SIGCHLD, reap)
    die_with_parent(signal.SIGTERM)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "quit":
            break
        if cmd[0] == "spawn":
            if len(cmd) > 2:
                set_next_pid(int(cmd[2]))
            pid = os.fork()
            if pid == 0:
                _child(cmd[1])
            children.add(pid)
            print(pid, flush=True)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for pid in list(children):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for pid in list(children):
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


# --------------------------------------------------------------------------------------------------
# A busy job tree: one Python root publishing its own segment and, on behalf of each child, the
# child's segment (a child is a real `sleep` process; its segment is what its probe would write).


def _payload(pid: int, ticks: int, ppid: int | None, role: str, index: int, gpus: int, calls: int) -> dict:
    p = segment.empty_payload(pid, ticks)
    p["ppid"] = ppid
    p["role"] = role
    p["argv0"] = "python"
    p["script"] = "train.py"
    p["runtime"] = cuda_runtime(gpus)
    device = f"cuda:{index % gpus}"
    # The run's key as a probe would publish it under torchrun (its run id; probe/_distributed.py).
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        p["job_key"], p["job_key_source"] = os.environ["TORCHELASTIC_RUN_ID"], "torchelastic"
    if role == "dataloader-worker":
        p["worker_id"] = index
        p["loader"] = "train"
        p["runtime"]["cuda_initialized"] = False
    else:
        if role == "rank":
            p["rank"] = p["local_rank"] = index
            p["world_size"] = gpus
            p["dist_backend"] = "nccl"
        p["memory"] = [
            {
                "device": device,
                "allocated_bytes": 6 << 30,
                "reserved_bytes": 8 << 30,
                "peak_allocated_bytes": 7 << 30,
                "peak_reserved_bytes": 8 << 30,
            }
        ]
        p["models"] = [
            {
                "name": "ResNet50",
                "class": "ResNet",
                "params": 25_557_032,
                "device": device,
                "devices": [device],
                "input_device": device,
                "forward_calls": calls,
                "forward_rate_hz": 20.0,
                "last_forward_time": time.time(),
                "data_wait_fraction": 0.05,
                "data_wait_s": 0.001,
                "step_s": 0.05,
                "train_steps": calls,
                "step_rate_hz": 20.0,
                "step_source": "lightning",
                "shared_memory": False,
            }
        ]
    p["published_at"] = time.time()
    return p


class _Kid:
    def __init__(self, index: int, role: str, root_pid: int):
        self.index, self.role = index, role
        self.proc = subprocess.Popen(
            ["sleep", "100000"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        self.ticks = process_start_ticks(self.proc.pid) or 0
        self.writer = segment.SegmentWriter(pid=self.proc.pid, start_ticks=self.ticks)
        self.root_pid = root_pid
        self.last_body: dict | None = None

    def publish(self, gpus: int, calls: int) -> None:
        payload = _payload(self.proc.pid, self.ticks, self.root_pid, self.role, self.index, gpus, calls)
        # As the probe does: a tick with nothing new (a worker's static facts) publishes nothing.
        body = {k: v for k, v in payload.items() if k != "published_at"}
        if body != self.last_body:
            self.writer.publish(payload)
            self.last_body = body

    def stop(self, abrupt: bool) -> None:
        if abrupt:  # a SIGKILLed process: its segment stays for the sidecar to clean up
            self.proc.kill()
            self.writer.detach()
        else:
            self.proc.terminate()
            self.writer.close()
        self.proc.wait()


def run_busy(args: argparse.Namespace) -> None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    die_with_parent(signal.SIGTERM)
    me = os.getpid()
    ticks = process_start_ticks(me) or 0
    root = segment.SegmentWriter()
    kids: list[_Kid] = []
    next_index = 0

    def new_kid(role: str | None = None) -> None:
        nonlocal next_index
        i = next_index
        next_index += 1
        kids.append(_Kid(i + 1, role or ("rank" if i + 1 < args.gpus else "dataloader-worker"), me))

    try:
        for _ in range(args.children):
            new_kid()
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"root": me, "children": [k.proc.pid for k in kids]}, f)
        os.replace(tmp, args.out)
        started = time.monotonic()
        next_publish = next_churn = started
        churned = 0
        killed: list[int] = []  # children stopped with SIGKILL: their segments are left behind
        while not stop:
            now = time.monotonic()
            if now >= next_publish:
                calls = int((now - started) * 20)
                root.publish(_payload(me, ticks, os.getppid(), "main", 0, args.gpus, calls))
                for k in kids:
                    k.publish(args.gpus, calls)
                next_publish += args.publish_interval
            if args.churn_period and now >= next_churn:
                new_kid("dataloader-worker")
                kids[-1].publish(args.gpus, 0)
                if len(kids) > args.children:
                    old = kids.pop(0)
                    abrupt = churned % 2 == 1
                    old.stop(abrupt=abrupt)
                    if abrupt:
                        killed.append(old.proc.pid)
                churned += 1
                next_churn += args.churn_period
                if churned % 10 == 0:
                    info = {"root": me, "children": [k.proc.pid for k in kids], "churned": churned}
                    with open(tmp, "w") as f:
                        json.dump({**info, "killed": killed}, f)
                    os.replace(tmp, args.out)
            wait = min(next_publish, next_churn if args.churn_period else next_publish) - time.monotonic()
            if wait > 0:
                time.sleep(wait)
    finally:
        for k in kids:
            k.stop(abrupt=False)
        root.close()


# --------------------------------------------------------------------------------------------------
# A real training job: torch (CPU) and the real probe.


def run_train(args: argparse.Namespace) -> None:
    import warnings

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    die_with_parent(signal.SIGTERM)
    result: dict = {"pid": os.getpid()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch

        import probe

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        x = torch.randn(256, 16)
        y = x.sum(dim=1, keepdim=True)
        probe.register(model, name="mlp")
        seg = segment.segment_path(os.getpid())
        result["segment_inode_start"] = os.stat(seg).st_ino if os.path.exists(seg) else None
        result["status_start"] = probe.status()
        print("training", flush=True)
        losses, steps, max_gap, last = [], 0, 0.0, time.monotonic()
        deadline = time.monotonic() + args.seconds
        filler = None
        while not stop and time.monotonic() < deadline:
            if args.stop_file and os.path.exists(args.stop_file):
                break
            if args.steps and steps >= args.steps:
                break
            i = steps % 8
            loss = torch.nn.functional.mse_loss(model(x[i * 32 : (i + 1) * 32]), y[i * 32 : (i + 1) * 32])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            steps += 1
            if steps % 50 == 0:
                probe.event(f"step {steps}")
            if args.fill_shm_after and steps == args.fill_shm_after:
                filler = _fill_shm()
                result["publishes_at_fill"] = probe.status()["publishes"]
                result["shm_free_after_fill"] = os.statvfs("/dev/shm").f_bavail
            now = time.monotonic()
            max_gap, last = max(max_gap, now - last), now
            if args.step_sleep:
                time.sleep(args.step_sleep)
        probe.refresh()
        result.update(
            steps=steps,
            max_step_gap_s=max_gap,
            loss_first=losses[0] if losses else None,
            loss_last=losses[-1] if losses else None,
            status=probe.status(),
            snapshot_errors=(probe.snapshot() or {}).get("errors"),
            segment_inode_end=os.stat(seg).st_ino if os.path.exists(seg) else None,
            own_read=segment.read_segment(os.getpid()).state,
            shm_entries=sorted(n for n in os.listdir("/dev/shm") if n.startswith("dsh-probe.")),
        )
        if filler is not None:
            os.unlink(filler)
    result["probe_warnings"] = [str(w.message) for w in caught if w.category.__name__ == "ProbeWarning"]
    result["other_warnings"] = [
        f"{w.category.__name__}: {w.message}" for w in caught if w.category.__name__ != "ProbeWarning"
    ]
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, args.out)


def _fill_shm() -> str:
    """Fill /dev/shm to the last byte; returns the filler's path."""
    path = "/dev/shm/stress-filler"
    chunk = b"\xa5" * 4096
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError:
                break
    finally:
        os.close(fd)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.helpers.stress_jobs")
    p.add_argument("mode", choices=["hot", "paced", "slow", "once", "wait", "zygote", "busy", "train"])
    p.add_argument("--name", default="net")
    p.add_argument("--children", type=int, default=63)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--publish-interval", type=float, default=1.0)
    p.add_argument("--churn-period", type=float, default=0.0)
    p.add_argument("--out", default="")
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--steps", type=int, default=0, help="train: stop after this many steps (0: no limit)")
    p.add_argument("--stop-file", default="")
    p.add_argument("--fill-shm-after", type=int, default=0)
    p.add_argument("--step-sleep", type=float, default=0.002)
    args = p.parse_args(argv)
    if args.mode in ("hot", "paced"):
        die_with_parent(signal.SIGKILL)
        run_hot(args.name, pause_s=0.002 if args.mode == "paced" else 0.0)
    elif args.mode == "slow":
        die_with_parent(signal.SIGKILL)
        run_slow(args.name)
    elif args.mode in ("once", "wait"):
        die_with_parent(signal.SIGTERM)
        run_once(args.name, wait_for_line=args.mode == "wait")
    elif args.mode == "zygote":
        run_zygote()
    elif args.mode == "busy":
        run_busy(args)
    else:
        run_train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
