"""Every warning code the verdict gives, grouped by what the user should do about it.

The one place a code's group and its one-line summary are written. The rules (rules.py,
efficiency.py) decide when a code fires and with which severity; the catalogue
(static/i18n/*.json, `warning.CODE`, `hint.CODE`) holds what the user reads. The README's table of
warning codes is generated from this module and the rules: after changing either, run
`python -m sidecar.verdict.codes_docs --write` (tests/unit/test_warning_codes.py fails until then,
and when a code is missing here, in the catalogue or in the rules).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ACTIONS", "CODES", "NOT_FROM_DECIDE", "Code"]

# What the user should do, in the order the README lists them: (key, heading).
ACTIONS: tuple[tuple[str, str], ...] = (
    ("fix-code", "Fix the training code"),
    ("fix-environment", "Fix the environment (torch build, driver, container, permissions)"),
    ("performance", "Look at performance: the job runs on the GPU, but not well"),
    ("job-state", "Start or resume the job"),
    ("informational", "Informational: nothing to fix"),
)


@dataclass(frozen=True)
class Code:
    action: str  # a key of ACTIONS
    summary: str  # one line of Markdown for the README: when the code fires


CODES: dict[str, Code] = {
    # fix the training code
    "model-on-cpu": Code("fix-code", "a GPU is usable but the model is on the CPU (never moved)"),
    "input-mismatch": Code("fix-code", "the model is on `cuda:0`, its inputs still on the CPU"),
    "mixed-devices": Code("fix-code", "parameters or models on several devices or device types"),
    "no-parameters": Code(
        "fix-code", "the registered module has no parameters: register the one that holds the weights"
    ),
    "registered-before-compile": Code(
        "fix-code",
        "a registered module inlined into a compiled parent: its calls cannot be counted; register the compiled module",
    ),
    "worker-cuda": Code(
        "fix-code", "a DataLoader worker holding a GPU context (CUDA's; HIP's or XPU's on AMD and Intel GPUs)"
    ),
    "rank-shared-gpu": Code("fix-code", "two `torch.distributed` ranks on one GPU"),
    "rank-device-mismatch": Code("fix-code", "a rank's model on another GPU than its `LOCAL_RANK`"),
    "memory-growth": Code("fix-code", "the job's GPU memory keeps growing (tensors kept across steps)"),
    "no-probe": Code(
        "fix-code",
        "no process of the job runs the probe: add `import probe; probe.register(model)` (in the job's "
        "first seconds, `probe_grace_s`, an info: waiting for the probe)",
    ),
    "unregistered-gpu-process": Code("fix-code", "a process uses the GPU without the probe"),
    "shared-model-unprobed-child": Code(
        "fix-code", "hogwild children that run the shared model without the probe"
    ),
    # fix the environment
    "cpu-build": Code(
        "fix-environment",
        "a CPU-only torch wheel on a machine with a GPU torch could use (NVIDIA, AMD or Intel)",
    ),
    "cuda-unavailable": Code(
        "fix-environment",
        "CUDA unusable by torch, with the reason: hidden by `CUDA_VISIBLE_DEVICES`, a driver older than torch's CUDA, no driver library in the container",
    ),
    "device-count-mismatch": Code(
        "fix-environment",
        "the system sees more graphics devices than torch can use (an Intel iGPU beside the NVIDIA card; "
        "AMD GPUs hidden by `HIP_VISIBLE_DEVICES`)",
    ),
    "nvml-unavailable": Code(
        "fix-environment",
        "the NVIDIA driver cannot be queried (an info where the OS lists no NVIDIA GPU: a CPU-only "
        "machine, or one whose AMD and Intel GPUs are read from the kernel)",
    ),
    "pid-namespace": Code(
        "fix-environment",
        "the sidecar runs in another PID namespace than the driver: run it with `--pid=host`",
    ),
    "probe-unreadable": Code(
        "fix-environment",
        "a process's probe segment cannot be read (another user's, corrupt), with the reason",
    ),
    "node-missing": Code(
        "fix-environment",
        "`dsh-sidecar cluster`: a node that ran the job stopped reporting to Prometheus (down, gone or stale)",
    ),
    "ranks-missing": Code(
        "fix-environment", "`dsh-sidecar cluster`: fewer ranks report than the job's world size"
    ),
    "probe-error": Code("fix-environment", "the probe could not publish, with the reason"),
    # performance
    "idle-gpu": Code(
        "performance",
        "GPU memory held at 0% utilisation while forward calls continue, with data loading named as the cause when the data wait says so over as many steps as `data-starved` needs",
    ),
    "data-starved": Code(
        "performance",
        "the step waits on the DataLoader, quoting its `num_workers`, `pin_memory`, `persistent_workers`",
    ),
    "throttled": Code(
        "performance",
        "clocks held down by heat, a power brake or a hardware slowdown while the GPU works (never the software power cap alone)",
    ),
    "pcie-degraded": Code(
        "performance", "the PCIe link trained below its generation or width while the job moves data"
    ),
    "hollow-utilisation": Code(
        "performance",
        "NVML says 90% busy while GPM shows few SMs working: small kernels or a launch-bound loop",
    ),
    "no-tensor-cores": Code(
        "performance", "fp32 weights, no autocast and no TF32 for matmuls on a GPU with tensor cores"
    ),
    "host-syncs": Code(
        "performance", "many `.item()`-style syncs per step, counted with `probe.register(model, syncs=True)`"
    ),
    "straggler-rank": Code(
        "performance",
        "one `torch.distributed` rank makes the others wait in the collectives, with the share of each step and why (data wait, forward, optimizer, a throttled GPU), over 30 steps or more and two polls",
    ),
    # the job's state, and informational
    "gpu-work-in-child": Code("informational", "the launcher's child process does the GPU work"),
    "target-exited": Code("job-state", "the watched process has exited; its last state is shown"),
    "job-stopped": Code("job-state", "the job is stopped (e.g. `kill -STOP`), and for how long"),
    "runs-not-recorded": Code(
        "informational",
        "the runs ledger (`--runs-db`) cannot be written (a full disk), with the reason: the job is watched, its run is not kept",
    ),
    "mig-no-process-util": Code(
        "informational", "MIG: per-process utilisation does not exist, shown as n/a rather than 0%"
    ),
}

# The codes decide() never gives: the cluster view's (verdict/cluster.py), and runs-not-recorded,
# which the poller adds to a settled verdict while the runs ledger fails (status.runs_not_recorded):
# no hysteresis holds it, and it goes with the ledger's fault.
NOT_FROM_DECIDE = frozenset({"node-missing", "ranks-missing", "runs-not-recorded"})
