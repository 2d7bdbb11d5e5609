"""Programs the probe's integration tests run in their own processes (no tests in here).

Run as ``python -m tests.helpers.probe_scenarios SCENARIO [ARGS...]`` from the repository
root; each scenario prints one JSON line on stdout for the test to check. It is a module in an
importable package, not a loose script, because DataLoader workers under ``spawn`` re-import the
main module and unpickle the dataset and worker_init_fn from it by name. It imports no torch and no
probe at module level: the stress writer must start fast and without torch.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------------------------------
# Payloads whose every part says which publish they came from: a torn read shows as a disagreement.


def consistent_payload(pid: int, start_ticks: int, n: int) -> dict:
    from probe_wire import empty_payload

    p = empty_payload(pid=pid, start_ticks=start_ticks)
    stamp = float(n)
    # Sizes vary with n so consecutive publishes differ in length as well as content.
    p["events"] = [{"time": stamp, "name": f"n{n}-{i}-" + "x" * (n % 97)} for i in range(n % 40 + 1)]
    p["errors"] = [
        {"time": stamp, "where": "stress", "message": str(n) * (1 + n % 50)} for _ in range(n % 16 + 1)
    ]
    p["models"] = [
        {
            "name": f"m{n}",
            "class": "Stress",
            "params": n,
            "device": "cpu",
            "devices": ["cpu"],
            "input_device": None,
            "forward_calls": n,
            "forward_rate_hz": stamp,
            "last_forward_time": stamp,
            "data_wait_fraction": None,
            "data_wait_s": None,
            "step_s": None,
        }
        for _ in range(n % 8 + 1)
    ]
    p["published_at"] = stamp
    p["argv0"] = "y" * (n % 1000)
    return p


def payload_problem(p: dict, header_published_at: float | None) -> str | None:
    """None when every counter in ``p`` agrees, else what disagrees."""
    n = p["models"][0]["forward_calls"] if p["models"] else None
    if n is None:
        return "no models"
    stamp = float(n)
    if p["published_at"] != stamp or header_published_at != stamp:
        return f"published_at {p['published_at']} / header {header_published_at} vs n {n}"
    if len(p["events"]) != n % 40 + 1 or any(
        e["time"] != stamp or not e["name"].startswith(f"n{n}-") for e in p["events"]
    ):
        return f"events disagree with n {n}"
    if len(p["errors"]) != n % 16 + 1 or any(e["message"] != str(n) * (1 + n % 50) for e in p["errors"]):
        return f"errors disagree with n {n}"
    if len(p["models"]) != n % 8 + 1 or any(
        m["params"] != n or m["name"] != f"m{n}" or m["forward_rate_hz"] != stamp for m in p["models"]
    ):
        return f"models disagree with n {n}"
    if p["argv0"] != "y" * (n % 1000):
        return f"argv0 disagrees with n {n}"
    return None


def scenario_stress_writer(duration_s: str) -> None:
    """Publish consistent payloads as fast as possible until a line (or the end) of stdin, for
    duration_s at most: the reader says when it is done, so no timing decides who stops first."""
    import threading

    from probe_wire import SegmentWriter

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    writer = SegmentWriter()
    n = 0
    writer.publish(consistent_payload(writer.pid, writer.start_ticks, n))
    emit({"ready": True, "pid": writer.pid, "start_ticks": writer.start_ticks})
    deadline = time.monotonic() + float(duration_s)
    while not stop.is_set() and time.monotonic() < deadline:
        n += 1
        writer.publish(consistent_payload(writer.pid, writer.start_ticks, n))
    emit({"published": n})
    writer.close()


def scenario_half_written() -> None:
    """Publish one good payload, then stop inside the next publish and wait to be killed."""
    from probe_wire import HEADER_BYTES, SegmentWriter, encode_payload

    writer = SegmentWriter()
    writer.publish(consistent_payload(writer.pid, writer.start_ticks, 1))
    data, _ = encode_payload(consistent_payload(writer.pid, writer.start_ticks, 2), writer.capacity_bytes)
    writer._begin()
    writer._mm[HEADER_BYTES : HEADER_BYTES + len(data) // 2] = data[: len(data) // 2]
    emit({"ready": True, "pid": writer.pid, "start_ticks": writer.start_ticks})
    time.sleep(60)


# --------------------------------------------------------------------------------------------------
# DataLoader workers


class SquaresDataset:
    """Item i is [i, i*i, ...]: the parent checks every batch it gets against this rule."""

    def __init__(self, n: int, delay_s: float) -> None:
        self.n = n
        self.delay_s = delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import torch

        time.sleep(self.delay_s)  # keeps the workers alive long enough to be looked at
        return torch.tensor([float(i), float(i * i), 1.0, 2.0])


def user_worker_init(worker_id: int) -> None:
    marker_dir = os.environ.get("PROBE_TEST_MARKER_DIR")
    if marker_dir:
        with open(os.path.join(marker_dir, f"init-{worker_id}-{os.getpid()}"), "w") as f:
            f.write("called")


def scenario_loader(start_method: str, register_loader: str) -> None:
    import torch
    from torch.utils.data import DataLoader

    import probe
    from probe_wire import read_segment, segment_path

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    dataset = SquaresDataset(48, 0.02)
    loader = DataLoader(
        dataset,
        batch_size=4,
        num_workers=2,
        multiprocessing_context=start_method,
        worker_init_fn=user_worker_init,
    )
    probe.register(model, name="net", loader=loader if register_loader == "1" else None)
    me = os.getpid()
    before = read_segment(me)
    it = iter(loader)
    got = [next(it)]
    worker_pids = [w.pid for w in it._workers]
    workers: dict[str, dict] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(workers) < len(worker_pids):
        for wpid in worker_pids:
            r = read_segment(wpid)
            if r.state == "ok":
                workers[str(wpid)] = {"payload": r.payload, "writer_pid": r.writer_pid}
        time.sleep(0.05)
    during = read_segment(me)
    for batch in it:
        got.append(batch)
        model(batch)
    del it  # shuts the workers down (the iterator's __del__ joins them)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists(segment_path(p)) for p in worker_pids):
        time.sleep(0.05)
    left = [p for p in worker_pids if os.path.exists(segment_path(p))]
    batches_ok = len(got) == 12 and all(
        bool(torch.equal(b, torch.stack([dataset[i] for i in range(k * 4, k * 4 + 4)])))
        for k, b in enumerate(got)
    )
    probe.refresh()
    after = read_segment(me)
    emit(
        {
            "parent_pid": me,
            "worker_pids": worker_pids,
            "workers": workers,
            "parent_before": {"state": before.state, "seq": before.seq},
            "parent_during": {"state": during.state, "seq": during.seq, "payload": during.payload},
            "parent_after": {"state": after.state, "payload": after.payload},
            "segments_left": left,
            "batches_ok": batches_ok,
        }
    )


def _spawned_rank(rank: int, with_user_fn: bool) -> None:
    """An ``mp.spawn`` rank: registers its model alone (no ``loader=``) and iterates a DataLoader with
    workers; in a spawned process they are spawned too (multiprocessing's start method there)."""
    import multiprocessing

    import torch
    from torch.utils.data import DataLoader

    import probe
    from probe_wire import read_segment

    model = probe.register(torch.nn.Linear(4, 2), name="rank-net")
    dataset = SquaresDataset(24, 0.05)
    user_fn = user_worker_init if with_user_fn else None
    loader = DataLoader(dataset, batch_size=4, num_workers=2, worker_init_fn=user_fn)
    it = iter(loader)
    got = [next(it)]
    worker_pids = [w.pid for w in it._workers]
    roles: dict[str, str | None] = {}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(roles) < len(worker_pids):
        for wpid in worker_pids:
            r = read_segment(wpid)
            if r.state == "ok" and r.payload is not None:
                roles[str(wpid)] = r.payload["role"]
        time.sleep(0.05)
    for batch in it:
        got.append(batch)
        model(batch)
    emit(
        {
            "rank_pid": os.getpid(),
            "start_method": multiprocessing.get_start_method(allow_none=True),
            "worker_pids": worker_pids,
            "roles": roles,
            "batches_ok": len(got) == 6 and _loader_batches_ok(got, dataset, 4),
        }
    )


def scenario_spawn_rank_loader(with_user_fn: str) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_spawned_rank, args=(with_user_fn == "1",), nprocs=1)


def _loader_batches_ok(got, dataset, batch_size: int) -> bool:
    import torch

    return all(
        bool(torch.equal(b, torch.stack([dataset[i] for i in range(k * batch_size, k * batch_size + batch_size)])))
        for k, b in enumerate(got)
    )


def scenario_two_loaders(start_method: str) -> None:
    """A train loader without a worker_init_fn (persistent workers, two epochs) and a validation
    loader with the user's, both registered, under one start method: every batch arrives as
    without the probe, and each worker publishes its own segment."""
    import torch
    from torch.utils.data import DataLoader

    import probe
    from probe_wire import read_segment

    model = torch.nn.Linear(4, 2)
    train_set, val_set = SquaresDataset(16, 0.01), SquaresDataset(8, 0.01)
    train = DataLoader(
        train_set, batch_size=4, num_workers=2, multiprocessing_context=start_method, persistent_workers=True
    )
    val = DataLoader(
        val_set, batch_size=4, num_workers=1, multiprocessing_context=start_method, worker_init_fn=user_worker_init
    )
    probe.register(model, name="net", loader=train)
    probe.register(model, loader=val)
    ok, roles, calls = True, {}, 0
    for _epoch in range(2):
        it = iter(train)
        got = []
        for batch in it:
            got.append(batch)
            model(batch)
            calls += 1
            for w in it._workers:
                r = read_segment(w.pid)
                if r.state == "ok":
                    roles[str(w.pid)] = r.payload["role"]
        ok = ok and len(got) == 4 and _loader_batches_ok(got, train_set, 4)
        vit = iter(val)
        vgot = list(vit)
        ok = ok and len(vgot) == 2 and _loader_batches_ok(vgot, val_set, 4)
    probe.refresh()
    after = read_segment(os.getpid())
    net = [m for m in after.payload["models"] if m["name"] == "net"][0]
    emit({"batches_ok": ok, "worker_roles": roles, "forward_calls": net["forward_calls"], "calls": calls})


# --------------------------------------------------------------------------------------------------
# Process lifecycle


def _model():
    import torch

    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def scenario_import() -> None:
    t0 = time.perf_counter()
    import probe  # noqa: F401

    import_s = time.perf_counter() - t0
    heavy = [
        m
        for m in ("torch", "numpy", "psutil", "pynvml", "flask", "multiprocessing.shared_memory")
        if m in sys.modules
    ]
    ours = sorted(m for m in sys.modules if m.split(".")[0] in ("probe", "probe_wire", "msgpack", "posix_ipc"))
    emit({"import_s": import_s, "heavy": heavy, "ours": ours})


def scenario_register_then(exit_how: str) -> None:
    import torch

    import probe
    from probe_wire import read_segment

    model = _model()
    probe.register(model)
    model(torch.zeros(1, 4))
    probe.event("about to exit")
    r = read_segment(os.getpid())
    emit({"state": r.state, "start_ticks": r.writer_start_ticks, "status": probe.status()})
    if exit_how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif exit_how == "exception":
        raise SystemExit(3)


def scenario_disabled() -> None:
    import threading

    import torch

    import probe
    from probe_wire import segment_path

    model = _model()
    returned = probe.register(model, loader=[1, 2])
    probe.event("x")
    probe.refresh()
    out = model(torch.zeros(1, 4))
    emit(
        {
            "same_model": returned is model,
            "hooks": len(model._forward_pre_hooks),
            "activate": probe.activate(),
            "snapshot": probe.snapshot(),
            "status": probe.status(),
            "segment_exists": os.path.exists(segment_path(os.getpid())),
            "threads": [t.name for t in threading.enumerate()],
            "output_shape": list(out.shape),
        }
    )


def scenario_no_posix_ipc() -> None:
    import warnings

    sys.modules["posix_ipc"] = None  # makes "import posix_ipc" raise ImportError, as if not installed
    import torch

    import probe
    from probe_wire import segment_path

    model = _model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probe.register(model)
        probe.register(_model())
        probe.event("x")
        out = model(torch.zeros(1, 4))
    emit(
        {
            "warnings": [str(w.message) for w in caught if w.category is probe.ProbeWarning],
            "status": probe.status(),
            "segment_exists": os.path.exists(segment_path(os.getpid())),
            "hooks": len(model._forward_pre_hooks),
            "output_shape": list(out.shape),
        }
    )


def scenario_fork_child() -> None:
    import torch

    import probe
    from probe_wire import read_segment, segment_path

    model = _model()
    probe.register(model, name="forked-net")
    for _ in range(3):
        model(torch.zeros(1, 4))
    probe.refresh()
    parent = os.getpid()
    before = read_segment(parent)
    r_fd, w_fd = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r_fd)
        for _ in range(5):
            model(torch.zeros(1, 4))
        deadline = time.monotonic() + 10
        mine = read_segment(os.getpid())
        while mine.state != "ok" and time.monotonic() < deadline:
            time.sleep(0.05)
            mine = read_segment(os.getpid())
        probe.refresh()
        mine = read_segment(os.getpid())
        with os.fdopen(w_fd, "w") as f:
            json.dump({"pid": os.getpid(), "state": mine.state, "payload": mine.payload}, f)
        sys.exit(0)  # a normal exit runs atexit, which must unlink the child's segment only
    os.close(w_fd)
    with os.fdopen(r_fd) as f:
        child_report = json.loads(f.read() or "{}")
    _, status = os.waitpid(child, 0)
    after = read_segment(parent)
    probe.refresh()
    final = read_segment(parent)
    emit(
        {
            "parent_pid": parent,
            "parent_final_calls": final.payload["models"][0]["forward_calls"] if final.payload else None,
            "child": child_report,
            "child_exit": os.waitstatus_to_exitcode(status),
            "child_segment_left": os.path.exists(segment_path(child)),
            "parent_before": {"state": before.state, "seq": before.seq, "payload": before.payload},
            "parent_after": {"state": after.state, "seq": after.seq, "payload": after.payload},
        }
    )


def scenario_spawn_child() -> None:
    import subprocess

    import probe

    probe.activate()
    out = subprocess.run(
        [sys.executable, "-m", "tests.helpers.probe_scenarios", "activate_and_report"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    emit({"parent_pid": os.getpid(), "child": json.loads(out.stdout.strip().splitlines()[-1])})


def scenario_activate_and_report() -> None:
    import probe
    from probe_wire import read_segment

    ok = probe.activate()
    r = read_segment(os.getpid())
    emit({"activated": ok, "state": r.state, "payload": r.payload})


SCENARIOS = {
    "two_loaders": scenario_two_loaders,
    "stress_writer": scenario_stress_writer,
    "half_written": scenario_half_written,
    "loader": scenario_loader,
    "spawn_rank_loader": scenario_spawn_rank_loader,
    "import": scenario_import,
    "register_then": scenario_register_then,
    "disabled": scenario_disabled,
    "no_posix_ipc": scenario_no_posix_ipc,
    "fork_child": scenario_fork_child,
    "spawn_child": scenario_spawn_child,
    "activate_and_report": scenario_activate_and_report,
}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](*sys.argv[2:])
