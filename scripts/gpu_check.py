"""Checks behind scripts/gpu_check.sh: the probe and the sidecar against a real CUDA GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

ROWS: list[tuple[str, str, str]] = []


def check(name: str, ok: bool | None, detail: str) -> None:
    ROWS.append((name, {True: "PASS", False: "FAIL", None: "SKIP"}[ok], detail))


def sidecar_once(pid: int) -> dict:
    r = subprocess.run([sys.executable, "-m", "sidecar.cli", "--pid", str(pid), "--once", "--json"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or f"exit {r.returncode}")
    return json.loads(r.stdout)


def main() -> int:
    import torch

    import probe

    check("torch", True, f"{torch.__version__}, CUDA build {torch.version.cuda}")
    if not torch.cuda.is_available():
        # Fail rather than skip: this script exists to check a GPU, and a machine without one (or a
        # CPU-only torch) must not pass for one.
        check("cuda available", False, "no CUDA GPU here (or a CPU-only torch): nothing can be checked")
        return report()
    # A publish with a model reads every runtime fact; asked before anything below initialises CUDA
    # (get_device_name does).
    cpu_model = probe.register(torch.nn.Linear(2, 2), name="gpu-check-cpu")
    probe.refresh()
    initialised = torch.cuda.is_initialized()
    probe.unregister(cpu_model)
    check("cuda available", True, f"{torch.cuda.device_count()} device(s): {torch.cuda.get_device_name(0)}")
    check("probe does not initialise CUDA", not initialised, "after a publish, before any model is moved")

    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).to("cuda:0")
    probe.register(model, name="gpu-check-mlp")
    x_cpu = torch.randn(512, 4096)
    try:
        model(x_cpu)  # inputs left on the CPU: torch raises; the probe must have seen the input device
        check("cpu inputs raise in torch", False, "expected a device mismatch error")
    except RuntimeError as exc:
        check("cpu inputs raise in torch", True, str(exc).splitlines()[0][:70])
    probe.refresh()
    doc = sidecar_once(os.getpid())
    codes = {w["code"] for w in doc["warnings"]}
    check("verdict GPU", doc["status"] == "GPU", doc["message"][:90])
    check("input-mismatch raised", "input-mismatch" in codes, ", ".join(sorted(codes)) or "no warnings")
    check("nvml ok", doc["nvml"]["ok"], f"driver {doc['nvml']['driver']}, CUDA {doc['nvml']['cuda_driver']}")
    check("uuid mapping", any(g["framework_index"] == 0 for g in doc["gpus"]),
          f"cuda:0 -> NVML {[g['index'] for g in doc['gpus'] if g['framework_index'] == 0]}")

    x = x_cpu.to("cuda:0")
    t_end = time.monotonic() + 8
    calls = 0
    while time.monotonic() < t_end:
        for _ in range(50):
            model(x).sum().backward()
            calls += 1
        torch.cuda.synchronize()
    probe.refresh()
    time.sleep(1.2)  # one probe publish period
    doc = sidecar_once(os.getpid())
    me = next(p for p in doc["processes"] if p["pid"] == os.getpid())
    check("input device now cuda:0", me["models"][0]["input_device"] == "cuda:0", str(me["models"][0]["input_device"]))
    check("allocator figures", (me.get("cuda_reserved_mib") or 0) > 0, f"reserved {me.get('cuda_reserved_mib')} MiB")
    check("nvml sees this pid", bool(me["gpu"]), f"{me['gpu']}")
    check("forward calls", me["models"][0]["forward_calls"] >= calls, f"{me['models'][0]['forward_calls']} >= {calls}")
    allocated = torch.cuda.memory_allocated(0) / 2**20
    check("torch allocated", allocated > 0, f"{allocated:.0f} MiB allocated")
    efficiency()
    steps("gpu_edges")
    steps("gpu_nvml")
    return report()


def efficiency() -> None:
    """Issue 15: every efficiency field, and the busy-but-hollow / tensor-heavy workloads."""
    import gpu_efficiency  # scripts/, beside this file

    for step in (gpu_efficiency.record_fields, gpu_efficiency.workloads):
        try:
            step(check)
        except Exception as exc:  # noqa: BLE001 -- whatever a step raises is a failed check; the table goes on
            check(step.__name__, False, f"{type(exc).__name__}: {exc}"[:120])


def steps(module: str) -> None:
    """The STEPS of a module beside this file (gpu_edges: the final state of mp.spawn ranks, NVML
    without libcuda, register then compile; gpu_nvml: the batched NVML fields against the getters)."""
    import importlib

    for step in importlib.import_module(module).STEPS:
        try:
            step(check)
        except Exception as exc:  # noqa: BLE001 -- whatever a step raises is a failed check; the table goes on
            check(step.__name__, False, f"{type(exc).__name__}: {exc}"[:120])


def report() -> int:
    width = max(len(r[0]) for r in ROWS)
    print(f"\n{'check'.ljust(width)}  result  detail")
    for name, result, detail in ROWS:
        print(f"{name.ljust(width)}  {result:6}  {detail}")
    return 1 if any(r[1] == "FAIL" for r in ROWS) else 0


if __name__ == "__main__":
    sys.exit(main())
