"""Checks behind `scripts/gpu_check.sh --amd`: the probe and the sidecar against a real AMD GPU
(ROCm torch, an MI-series or Radeon card), as scripts/gpu_check.py does for CUDA.

A training job (this file with ``--job``, a child process) registers a model on ``cuda:0`` (a ROCm
build's name for its first AMD GPU), feeds it CPU inputs once (the input-mismatch case), then holds a
known 2 GiB tensor and runs a few training steps. Against it:

- the sidecar (``python -m sidecar.cli --pid PID --once --json``): status GPU, ``input-mismatch``,
  the AMD card (vendor amd, its PCI address as torch gives it), ``model_gpu_index`` and
  ``framework_index`` naming that card, the job's own memory on it;
- AMD's tools: ``amd-smi process --json`` (else ``rocm-smi --showpids --json``): the sidecar's
  per-process memory within 5 % of theirs; KFD's own ``vram_<gpu_id>`` files shown beside.

Prints the same table as gpu_check.py and exits non-zero when a row fails, and at once (FAIL)
without an AMD GPU (no /dev/kfd or no amdgpu card) or without a ROCm torch.
"""

from __future__ import annotations

import glob
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from typing import Any

import gpu_amd_smi as smi  # scripts/, beside this file
import gpu_vendor
from gpu_check import check, report, sidecar_once

ALLOC_MIB = 2048  # the job's known allocation
TOLERANCE_PCT = 5.0
TRAIN_S = 4.0
PUBLISH_WAIT_S = 1.2  # one probe publish period
STEP_TIMEOUT_S = 120.0  # the job's first HIP call can take a while (kernels load)
TOOL_TIMEOUT_S = 60
ROCM_BIN = "/opt/rocm/bin"


# --- the training job (a child process) ---------------------------------------------------------


def _say(step: str, **fields: Any) -> None:
    print(json.dumps({"step": step, **fields}), flush=True)


def job() -> int:
    import torch

    import probe
    from probe.facts import _pci_address  # the probe's spelling of a device's PCI address

    if not torch.cuda.is_available():
        _say("facts", available=False, hip=getattr(torch.version, "hip", None))
        return 1
    # A publish with a model reads every runtime fact; asked before anything initialises HIP.
    cpu_model = probe.register(torch.nn.Linear(2, 2), name="gpu-check-amd-cpu")
    probe.refresh()
    initialised = torch.cuda.is_initialized()
    probe.unregister(cpu_model)
    props = torch.cuda.get_device_properties(0)
    _say(
        "facts",
        available=True,
        hip=torch.version.hip,
        initialised=initialised,
        device_count=torch.cuda.device_count(),
        name=props.name,
        pci=_pci_address(props),
        gcn_arch=getattr(props, "gcnArchName", None),
    )

    model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).to(
        "cuda:0"
    )
    probe.register(model, name="gpu-check-amd-mlp")
    x_cpu = torch.randn(256, 2048)
    try:
        model(x_cpu)
        error = None
    except RuntimeError as exc:
        error = str(exc).splitlines()[0][:70]
    probe.refresh()
    _say("mismatch", error=error)
    sys.stdin.readline()  # the parent has read the sidecar's verdict

    held = torch.ones(ALLOC_MIB * 2**20, dtype=torch.uint8, device="cuda:0")  # written: resident
    x = x_cpu.to("cuda:0")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    calls = 0
    t_end = time.monotonic() + TRAIN_S
    while time.monotonic() < t_end:
        for _ in range(20):
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
            calls += 1
        torch.cuda.synchronize()
    probe.refresh()
    time.sleep(PUBLISH_WAIT_S)
    _say(
        "trained",
        calls=calls,
        held_mib=held.numel() / 2**20,
        allocated_mib=torch.cuda.memory_allocated(0) / 2**20,
        reserved_mib=torch.cuda.memory_reserved(0) / 2**20,
    )
    sys.stdin.read()  # held until the parent has read every tool (stdin closes)
    return 0


# --- the parent: the checks ----------------------------------------------------------------------


class Job:
    """The training job as a child process, spoken to by lines (JSON from it, a newline to it)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--job"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def expect(self, step: str) -> dict[str, Any]:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while True:
            try:
                line = self._lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(
                    f"the job said nothing for {STEP_TIMEOUT_S:.0f} s (waiting for {step})"
                ) from None
            if not line:
                raise RuntimeError(f"the job exited ({self.proc.wait()}) before {step}")
            try:
                msg = json.loads(line)
            except ValueError:
                continue  # the job's own output (warnings, logging)
            if isinstance(msg, dict) and msg.get("step") == step:
                return msg

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def amd_gpu_present() -> bool:
    sysfs, devfs = os.environ.get("GPU_CHECK_SYSFS", "/sys"), os.environ.get("GPU_CHECK_DEVFS", "/dev")
    cards = gpu_vendor.amd_cards(sysfs)
    kfd = os.path.exists(os.path.join(devfs, "kfd"))
    if kfd and cards:
        check("amd gpu", True, ", ".join(f"{c.card} {c.pci} ({c.device_id})" for c in cards))
        return True
    # Fail rather than skip, as gpu_check.py does: a machine without one must not pass for one.
    missing = ([] if kfd else [f"no {devfs}/kfd"]) + (
        [] if cards else [f"no amdgpu card in {sysfs}/class/drm"]
    )
    check("amd gpu", False, f"{'; '.join(missing)}: nothing can be checked")
    return False


def rocm_torch() -> bool:
    try:
        import torch
    except ImportError as exc:
        check("torch ROCm build", False, f"torch not importable: {exc}"[:120])
        return False
    hip = getattr(torch.version, "hip", None)
    if hip:
        check("torch ROCm build", True, f"{torch.__version__}, HIP {hip}")
        return True
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only"
    check(
        "torch ROCm build",
        False,
        f"{torch.__version__} is a {build} build (no torch.version.hip): "
        "install the ROCm wheel (download.pytorch.org/whl/rocmX.Y)",
    )
    return False


def main() -> int:
    if not amd_gpu_present() or not rocm_torch():
        return report()
    job = Job()
    try:
        run_checks(job)
    except Exception as exc:  # noqa: BLE001 -- whatever a step raises is a failed check; the table goes on
        check("job", False, f"{type(exc).__name__}: {exc}"[:120])
    finally:
        job.close()
    return report()


def run_checks(job: Job) -> None:
    facts = job.expect("facts")
    if not facts.get("available"):
        check(
            "cuda:0 available",
            False,
            f"torch.cuda.is_available() is False (HIP {facts.get('hip')}): "
            "devices hidden (HIP/ROCR_VISIBLE_DEVICES), or not in the render/video group?",
        )
        return
    check(
        "cuda:0 available",
        True,
        f"{facts['device_count']} device(s): {facts['name']} {facts.get('gcn_arch')}",
    )
    check(
        "probe does not initialise HIP",
        not facts["initialised"],
        "after a publish, before any model is moved",
    )
    mismatch = job.expect("mismatch")
    check(
        "cpu inputs raise in torch",
        mismatch["error"] is not None,
        mismatch["error"] or "expected a device mismatch",
    )
    pid = job.proc.pid
    doc = sidecar_once(pid)
    card = verdict_checks(doc, facts.get("pci"))
    job.go()
    trained = job.expect("trained")
    doc = sidecar_once(pid)
    memory_checks(doc, pid, card, trained)


def _card_of(doc: dict[str, Any], pci: str | None) -> dict[str, Any] | None:
    """The document's AMD GPU that torch's cuda:0 is: by PCI address; the only AMD GPU when torch
    gives none (an older torch)."""
    amd = [g for g in doc["gpus"] if g.get("vendor") == "amd"]
    if pci:
        return next((g for g in amd if smi.pci_key(g.get("pci_bus_id")) == smi.pci_key(pci)), None)
    return amd[0] if len(amd) == 1 else None


def verdict_checks(doc: dict[str, Any], pci: str | None) -> dict[str, Any] | None:
    codes = {w["code"] for w in doc["warnings"]}
    check("verdict GPU", doc["status"] == "GPU", doc["message"][:90])
    check("input-mismatch raised", "input-mismatch" in codes, ", ".join(sorted(codes)) or "no warnings")
    card = _card_of(doc, pci)
    listed = [(g["index"], g.get("vendor"), g.get("pci_bus_id")) for g in doc["gpus"]]
    check(
        "amd card",
        card is not None,
        f"index {card['index']}, {card.get('name')}, driver {card.get('driver')}, {card.get('pci_bus_id')}"
        if card
        else f"cuda:0 is {pci}; the document lists {listed}",
    )
    index = card["index"] if card else None
    check(
        "framework_index",
        card is not None and card.get("framework_index") == 0,
        f"cuda:0 -> GPU {[g['index'] for g in doc['gpus'] if g.get('framework_index') == 0]}, want {index}",
    )
    check(
        "model_gpu_index",
        index is not None and doc.get("model_gpu_index") == index,
        f"{doc.get('model_gpu_index')}, want {index} (the AMD GPU cuda:0 is)",
    )
    return card


def _job_row(me: dict[str, Any], card: dict[str, Any] | None) -> dict[str, Any] | None:
    """The job's row on the card: its memory there, as the sidecar tells it."""
    return next((g for g in me["gpu"] if card is not None and g.get("index") == card["index"]), None)


def memory_checks(
    doc: dict[str, Any], pid: int, card: dict[str, Any] | None, trained: dict[str, Any]
) -> None:
    me = next((p for p in doc["processes"] if p["pid"] == pid), None)
    if me is None:
        check("sidecar sees the job", False, f"pid {pid} not among {[p['pid'] for p in doc['processes']]}")
        return
    model = me["models"][0] if me["models"] else {}
    check("input device now cuda:0", model.get("input_device") == "cuda:0", str(model.get("input_device")))
    check(
        "forward calls",
        (model.get("forward_calls") or 0) >= trained["calls"],
        f"{model.get('forward_calls')} >= {trained['calls']}",
    )
    check(
        "allocator figures",
        (me.get("cuda_reserved_mib") or 0) >= ALLOC_MIB,
        f"reserved {me.get('cuda_reserved_mib')} MiB (torch: {trained['reserved_mib']:.0f})",
    )
    row = _job_row(me, card)
    mine = row.get("mem_used_mib") if row else None
    check(
        "sidecar: job memory on the card",
        mine is not None and mine >= ALLOC_MIB,
        f"{mine} MiB (holds {ALLOC_MIB} MiB; util {row.get('sm_util_pct')}, {row.get('unknown_reason')})"
        if row
        else f"no row on the AMD card: {me['gpu']}",
    )
    kfd = kfd_vram_mib(pid)
    check(
        "kfd vram (sysfs)",
        None if kfd is None else kfd >= ALLOC_MIB,
        "not readable" if kfd is None else f"{kfd:.1f} MiB in /sys/class/kfd/kfd/proc/{pid}/vram_*",
    )
    compare_with_tools(pid, mine, card)


def kfd_vram_mib(pid: int) -> float | None:
    """The job's VRAM as KFD's own files tell it (every GPU), for the table: None when unreadable."""
    total, seen = 0, False
    for path in glob.glob(f"/sys/class/kfd/kfd/proc/{pid}/vram_*"):
        try:
            with open(path, encoding="ascii") as f:
                total += int(f.read().strip() or 0)
            seen = True
        except (OSError, ValueError):
            continue
    return total / smi.MIB if seen else None


def _tool(name: str) -> str | None:
    return shutil.which(name) or (
        os.path.join(ROCM_BIN, name) if os.access(os.path.join(ROCM_BIN, name), os.X_OK) else None
    )


def _run(argv: list[str]) -> tuple[str | None, str]:
    """(stdout, "") when the tool ran, else (None, why)."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"[:100]
    if r.returncode != 0 and not r.stdout.strip():
        return None, f"exit {r.returncode}: {(r.stderr.strip() or 'no output')[:100]}"
    return r.stdout, ""


def read_tools(pid: int) -> tuple[smi.SmiReading | None, smi.SmiReading | None, dict[int, str]]:
    """amd-smi's process list (and its GPU numbers' PCI addresses), and rocm-smi's; None: not installed."""
    amd = rocm = None
    bdfs: dict[int, str] = {}
    if exe := _tool("amd-smi"):
        out, why = _run([exe, "process", "--json"])
        amd = (
            smi.parse_amd_smi_process(out)
            if out is not None
            else smi.SmiReading("amd-smi process", error=why)
        )
        listed, _ = _run([exe, "list", "--json"])
        bdfs = smi.parse_amd_smi_list(listed or "")
    if exe := _tool("rocm-smi"):
        out, why = _run([exe, "--showpids", "--json"])
        rocm = (
            smi.parse_rocm_smi_pids(out)
            if out is not None
            else smi.SmiReading("rocm-smi --showpids", error=why)
        )
    return amd, rocm, bdfs


def _tool_row(reading: smi.SmiReading, pid: int, gpu: int | None) -> float | None:
    name = reading.tool
    if reading.error:
        check(name, False, f"cannot parse: {reading.error}"[:120])
        return None
    mib = reading.vram_mib_of(pid, gpu)
    fields = sorted({p.field for p in reading.rows_of(pid)})
    check(
        name,
        mib is not None,
        f"{mib:.1f} MiB ({reading.shape}; {', '.join(fields)})"
        if mib is not None
        else f"no VRAM figure for pid {pid} ({reading.shape}; {len(reading.processes)} process rows)",
    )
    return mib


def compare_with_tools(pid: int, mine: float | None, card: dict[str, Any] | None) -> None:
    amd, rocm, bdfs = read_tools(pid)
    want = smi.pci_key(card.get("pci_bus_id")) if card else None
    gpu = next((n for n, bdf in bdfs.items() if smi.pci_key(bdf) == want), None)
    if amd is not None and bdfs:
        check("amd-smi gpu of the card", gpu is not None, f"amd-smi GPU {gpu} is {want} (list: {bdfs})")
    amd_mib = _tool_row(amd, pid, gpu) if amd is not None else None
    rocm_mib = _tool_row(rocm, pid, None) if rocm is not None else None
    if amd is None and rocm is None:
        check(
            "amd-smi / rocm-smi", False, "neither is installed (PATH, /opt/rocm/bin): nothing to compare with"
        )
        return
    ref, source = (amd_mib, "amd-smi") if amd_mib is not None else (rocm_mib, "rocm-smi")
    detail = (
        f"sidecar {mine} MiB, {source} {ref:.1f} MiB"
        if ref is not None and mine is not None
        else f"sidecar {mine} MiB, amd-smi {amd_mib}, rocm-smi {rocm_mib}: a figure is missing"
    )
    check(
        f"memory within {TOLERANCE_PCT:.0f} % of the AMD tool",
        smi.within_pct(mine, ref, TOLERANCE_PCT),
        detail,
    )


if __name__ == "__main__":
    sys.exit(job() if sys.argv[1:2] == ["--job"] else main())
