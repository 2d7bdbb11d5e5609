"""An XPU job (a model on `xpu:N`, an Intel GPU through torch.xpu) gets the verdicts a CUDA job gets
(issue 41 item 6): idle-gpu, data-starved, input-mismatch, memory-growth, model-on-cpu and the rank
verdicts, from what the DRM reader tells of its process on the Intel GPU, at the job's first polls,
in steady state and after it ends.

The job's rows come from the real reader (VendorGpuSampler over a fixture /proc of i915 DRM clients
and a fixture /sys of Intel cards), its history from the poller's own history_sample, one poll every
1.5 s; the probe's part (its XPU build, its model and steps) is written as the verdict tests write it.

An Intel GPU's driver prints no device busy figure, so idle-gpu reads the job's own DRM engine time;
where that is unknown (a client's first reading) nothing is said. Of several Intel GPUs, which one
`xpu:N` is cannot be told (the probe gives no PCI address for it): no GPU is named, and no rank is
said to share one, though an idle job on all of them is still idle."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from probe_wire.records import RuntimeRecord
from sidecar.poll.samples import history_sample
from sidecar.poll.vendor_gpus import VendorGpuSampler
from sidecar.sources.drm import DrmSampler
from sidecar.sources.host import HostPaths
from sidecar.sources.sysfs import list_system_gpus
from sidecar.verdict import Facts, Finding, GpuFacts, ProcGpu, RecentSample, decide, map_xpu_index
from tests.fakenvml import make_fake_sysfs
from tests.helpers.drm_samples import FD_HEAD, FakeProc, FakeStat
from tests.helpers.gpu_sysfs_trees import I915_IGPU
from tests.helpers.verdict_facts import CUDA_RT, H200, XPU_RT, en, facts, model, proc, settled_facts, zh

PID = 4242
POLL_S = 1.5
IGPU_PCI = I915_IGPU["pci"]
ARC = {**I915_IGPU, "card": "card1", "pci": "0000:03:00.0", "device": "0x56a0"}  # an Arc A770 (i915)


def i915_fdinfo(client_id: int, pdev: str, render_ns: int, resident_kib: int) -> str:
    """An i915 client's fdinfo as 6.x kernels print it (an iGPU's memory: system0 alone)."""
    return (
        FD_HEAD + f"drm-driver:\ti915\ndrm-pdev:\t{pdev}\ndrm-client-id:\t{client_id}\n"
        f"drm-total-system0:\t{resident_kib} KiB\ndrm-resident-system0:\t{resident_kib} KiB\n"
        f"drm-engine-render:\t{render_ns} ns\ndrm-engine-copy:\t0 ns\n"
    )


class XpuJob:
    """A job whose process PID trains on `xpu:0` (its XPU build's one Intel GPU, unless given more
    cards), polled every POLL_S: its DRM clients' engine time and memory move as each poll says, the
    reader makes its rows, history_sample its history."""

    def __init__(self, root: Path, cards: tuple[dict, ...] = (I915_IGPU,), *, nvidia: bool = False) -> None:
        self.fake = FakeProc(root)
        make_fake_sysfs(root / "sys", cards)
        host = HostPaths(procfs=str(self.fake.root), sysfs=str(root / "sys"))
        self.clock_ns = 5_000 * 10**9
        drm = DrmSampler(host=host, clock_ns=lambda: self.clock_ns, stat_fd=FakeStat())
        self.sampler = VendorGpuSampler(host=host, drm=drm)
        nvml = (H200,) if nvidia else ()  # a laptop's NVIDIA card: NVML's GPU 0, the iGPU after it
        self.nvidia = nvidia
        self.gpus = nvml + self.sampler.gpus(list_system_gpus(host=host), len(nvml))
        self.clients: dict[int, list] = {}  # fd -> [client id, PCI address, engine ns so far]
        self.recent: list[RecentSample] = []
        self.steps = 0

    def open(self, fd: int, pdev: str = IGPU_PCI) -> None:
        """The process opens an Intel GPU (Level Zero opens each one it lists): one DRM client."""
        self.clients[fd] = [100 + fd, pdev, 0]
        self.fake.fd(PID, fd, i915_fdinfo(100 + fd, pdev, 0, 4096))

    def poll(
        self,
        busy: dict[int, float] | None = None,
        *,
        steps: int = 10,
        mem_mib: float = 4.0,
        device: str = "xpu:0",
        runtime: RuntimeRecord = XPU_RT,
        **model_kw,
    ) -> Facts:
        """POLL_S later: each fd's client busy its share ``busy[fd]`` of it (none: idle), holding
        ``mem_mib``; the model ``steps`` steps further. The poll's facts, with the history so far."""
        self.clock_ns += int(POLL_S * 1e9)
        for fd, client in self.clients.items():
            client[2] += int((busy or {}).get(fd, 0.0) * POLL_S * 1e9)
            self.fake.rewrite(PID, fd, i915_fdinfo(client[0], client[1], client[2], int(mem_mib * 1024)))
        rows = self.sampler.poll([PID], self.gpus).by_pid.get(PID, [])
        self.steps += steps
        m = replace(model(device, **model_kw), train_steps=self.steps)
        return self._add(proc(PID, runtime=runtime, models=[m], gpu=rows), alive=True)

    def end(self) -> Facts:
        """The job has exited: its last facts, with no GPU rows (the driver lists it no more)."""
        self.clock_ns += int(POLL_S * 1e9)
        m = replace(model("xpu:0"), train_steps=self.steps)
        return self._add(proc(PID, runtime=XPU_RT, models=[m], exited=True), alive=False)

    def _add(self, p, *, alive: bool) -> Facts:
        f = facts(p, gpus=self.gpus, nvml_ok=self.nvidia, target_alive=alive)
        self.recent.append(history_sample(self.clock_ns / 1e9, f).recent)
        return f.with_recent(tuple(self.recent))


def found(f: Facts) -> dict[str, Finding]:
    return {w.code: w for w in decide(f).warnings}


def test_idle_gpu_waits_for_evidence_then_says_the_intel_gpu_idles_while_steps_go_on(tmp_path: Path):
    job = XpuJob(tmp_path)
    job.open(5)
    first = job.poll()
    (row,) = first.processes[0].gpu
    # The first poll: no rate yet, said so (never a 0 that would read as idle).
    assert (row.vendor, row.sm_util, row.unknown_reason) == ("intel", None, "first-sample")
    assert job.recent[-1].tree_sm_util is None and job.recent[-1].model_gpu_util is None
    v = decide(first)
    assert v.status == "GPU" and v.model_gpu_index == job.gpus[0].index
    # Idle from the second poll on, steps going on: idle-gpu once the idle window (10 s) is covered
    # by known figures alone, the first poll's unknown one left behind (12 s after it, not 10.5 s).
    said = []
    for _ in range(8):
        f = job.poll()
        said.append("idle-gpu" in found(f))
    assert job.recent[-1].tree_sm_util == 0.0
    assert said == [False] * 7 + [True]
    w = found(f)["idle-gpu"]
    assert w.pids == (PID,)
    assert en(w.message) == (
        "The model is on the GPU but the GPU has been below 5% busy for 10 s while training steps continue."
    )
    assert "{" not in zh(w.message) and "{" not in zh(w.hint)


def test_a_busy_intel_gpu_or_a_paused_job_is_no_idle_gpu(tmp_path: Path):
    job = XpuJob(tmp_path)
    job.open(5)
    for _ in range(12):
        f = job.poll({5: 0.6})
    assert job.recent[-1].tree_sm_util == pytest.approx(60.0)
    assert decide(f).status == "GPU" and "idle-gpu" not in found(f)
    for _ in range(12):
        f = job.poll(steps=0)  # idle, but no steps: paused or evaluating elsewhere, not starved
    assert "idle-gpu" not in found(f)


def test_after_the_job_ends_nothing_of_its_gpu_is_said(tmp_path: Path):
    job = XpuJob(tmp_path)
    job.open(5)
    polls = [job.poll() for _ in range(12)]
    assert "idle-gpu" in found(polls[-1])
    polls += [job.end(), job.end()]
    assert job.recent[-1].tree_sm_util is None
    shown = settled_facts(polls)
    assert "idle-gpu" in [w.code for w in shown[-3].warnings]
    assert [w.code for w in shown[-1].warnings] == ["target-exited", "nvml-unavailable"]
    assert shown[-1].status == "GPU" and shown[-1].message.id == "message.exited"


def test_data_starved_and_idle_gpus_hint_on_an_intel_gpu(tmp_path: Path):
    job = XpuJob(tmp_path)
    job.open(5)
    for _ in range(12):
        f = job.poll(wait=0.8, batches=64)
    got = found(f)
    assert en(got["data-starved"].message) == f"Process {PID} waits for data 80% of each training step."
    assert "pin_memory=True" in en(got["data-starved"].hint)  # pinned copies to an accelerator
    assert en(got["idle-gpu"].hint).startswith(
        "Data loading starves the GPU: the loop waits for the next batch 80%"
    )


def test_input_mismatch_between_an_xpu_model_and_cpu_inputs(tmp_path: Path):
    job = XpuJob(tmp_path)
    job.open(5)
    w = found(job.poll({5: 0.5}, inp="cpu"))["input-mismatch"]
    assert en(w.message) == "Model Net is on xpu:0 but is called with inputs on cpu."
    assert "x.to('xpu:0', non_blocking=True)" in en(w.hint)
    assert "input-mismatch" not in found(job.poll({5: 0.5}, inp="xpu:0"))


def test_memory_growth_of_the_jobs_intel_gpu_memory(tmp_path: Path):
    job = XpuJob(tmp_path)
    job.open(5)
    for i in range(70):  # 105 s, growing 8 MiB a poll from 1 GiB
        f = job.poll({5: 0.5}, mem_mib=1024.0 + 8 * i)
    w = found(f)["memory-growth"]
    assert en(w.message).startswith("The job's GPU memory keeps growing: 1024 → 1576 MiB")
    assert "torch.xpu.memory_stats()" in en(w.hint) and "torch.cuda" not in en(w.hint)
    assert "torch.xpu.memory_stats()" in zh(w.hint)
    flat = XpuJob(tmp_path / "flat")
    flat.open(5)
    for _ in range(70):
        f = flat.poll({5: 0.5}, mem_mib=1024.0)
    assert "memory-growth" not in found(f)


def test_model_on_cpu_with_an_xpu_build_that_sees_its_gpu(tmp_path: Path):
    job = XpuJob(tmp_path)
    job.open(5)
    w = found(job.poll(device="cpu"))["model-on-cpu"]
    assert en(w.hint).startswith("Move it: `model.to('xpu')` (and its inputs: `x = x.to('xpu')`)")
    # An XPU build that sees no Intel GPU: cpu-build's and device-count's business, not this.
    gone = replace(XPU_RT, xpu_available=False, xpu_device_count=0)
    assert "model-on-cpu" not in found(job.poll(device="cpu", runtime=gone))
    # NVIDIA's text is as it was.
    cuda = found(facts(proc(models=[model("cpu")], runtime=CUDA_RT)))["model-on-cpu"]
    assert en(cuda.hint).startswith("Move it: `model.to('cuda')` (and its inputs: `x = x.to('cuda')`)")


def test_the_laptop_an_xpu_job_on_the_igpu_beside_the_nvidia_card(tmp_path: Path):
    """The seed's laptop: NVML's GPU 0, the iGPU after it. The job's model is on the iGPU; the NVIDIA
    card's busy figure (80 %) is not the job's."""
    job = XpuJob(tmp_path, nvidia=True)
    assert [(g.index, g.vendor) for g in job.gpus] == [(0, "nvidia"), (1, "intel")]
    job.open(5)
    for _ in range(12):
        f = job.poll()
    v = decide(f)
    assert v.status == "GPU" and v.model_gpu_index == 1 and f.job_gpu_indices == (1,)
    assert "idle-gpu" in found(f)


def test_of_several_intel_gpus_none_is_named_and_idle_is_told_from_all_of_them(tmp_path: Path):
    """The job's rows on each card it opened are summed: an idle sum is each card idle, a busy one
    no idle-gpu; a card opened since the last poll (its first reading unknown) leaves the sum unknown."""
    job = XpuJob(tmp_path, (I915_IGPU, ARC))
    job.open(5, IGPU_PCI)
    for _ in range(12):
        f = job.poll()
    assert map_xpu_index(XPU_RT, 0, f.gpus) is None and decide(f).model_gpu_index is None
    assert "idle-gpu" in found(f)
    job.open(6, ARC["pci"])  # it starts on the Arc card: unknown at first, not the iGPU's 0 alone
    f = job.poll({6: 0.7})
    assert job.recent[-1].tree_sm_util is None and "idle-gpu" not in found(f)
    for _ in range(12):
        f = job.poll({6: 0.7})
    assert sorted(g.index for g in f.processes[0].gpu) == [0, 1]
    assert job.recent[-1].tree_sm_util == pytest.approx(70.0) and "idle-gpu" not in found(f)
    for _ in range(12):
        f = job.poll()
    assert "idle-gpu" in found(f) and decide(f).model_gpu_index is None


# ---------------------------------------------------------------------------------------------
# Ranks on Intel GPUs
# ---------------------------------------------------------------------------------------------
IGPU = GpuFacts(0, name="Intel GPU", pci_bus_id=IGPU_PCI, vendor="intel", driver="i915")
ARC_GPU = GpuFacts(1, name="Intel GPU", pci_bus_id=ARC["pci"], vendor="intel", driver="i915")


def _rank(pid: int, local_rank: int, device: str, gpus: tuple[GpuFacts, ...], count: int):
    """A rank on `device` whose process holds 300 MiB on each of ``gpus`` (Level Zero's context)."""
    rows = [ProcGpu(g.index, 300.0, 40.0, None, "intel", g.pci_bus_id) for g in gpus]
    rt = replace(XPU_RT, xpu_device_count=count)
    return proc(pid, runtime=rt, models=[model(device)], gpu=rows, role="rank", local_rank=local_rank)


def test_ranks_on_one_intel_gpu_share_it_and_are_told_torch_xpu():
    f = facts(
        _rank(100, 0, "xpu:0", (IGPU,), 1), _rank(101, 1, "xpu:0", (IGPU,), 1), gpus=(IGPU,), nvml_ok=False
    )
    w = found(f)["rank-shared-gpu"]
    assert w.pids == (100, 101) and w.message.params["gpu"] == 0
    assert en(w.hint) == (
        "Call `torch.xpu.set_device(local_rank)` and use `device = torch.device('xpu', local_rank)` in each rank."
    )
    assert "torch.xpu.set_device" in zh(w.hint)
    # One visible GPU per rank (ZE_AFFINITY_MASK): xpu:0 is right for each rank.
    assert "rank-device-mismatch" not in found(f)


def test_ranks_on_several_intel_gpus_are_not_guessed_to_share_one():
    """Each rank holds memory on both cards (Level Zero's context spans them) and `xpu:N` maps to
    neither: no rank-shared-gpu from the memory rows, which would name one card for both ranks."""
    both = (IGPU, ARC_GPU)
    f = facts(_rank(100, 0, "xpu:0", both, 2), _rank(101, 1, "xpu:1", both, 2), gpus=both, nvml_ok=False)
    assert "rank-shared-gpu" not in found(f) and "rank-device-mismatch" not in found(f)
    # Rank 1 on xpu:0 of two it sees: the device its LOCAL_RANK names is not the one it uses.
    f = facts(_rank(100, 0, "xpu:0", both, 2), _rank(101, 1, "xpu:0", both, 2), gpus=both, nvml_ok=False)
    w = found(f)["rank-device-mismatch"]
    assert w.pids == (101,) and en(w.message) == "Rank with LOCAL_RANK=1 (pid 101) has model Net on xpu:0."
    assert en(w.hint) == (
        "Use `device = torch.device('xpu', int(os.environ['LOCAL_RANK']))` and `torch.xpu.set_device(device)`."
    )
    # NVIDIA's ranks sharing a GPU by their memory are told as before.
    cuda_rank = lambda pid: proc(  # noqa: E731
        pid, runtime=replace(CUDA_RT, device_count=2), models=[], role="rank", local_rank=0,
        gpu=[ProcGpu(0, 300.0, 40.0)],
    )  # fmt: skip
    w = found(facts(cuda_rank(100), cuda_rank(101)))["rank-shared-gpu"]
    assert en(w.hint).startswith("Call `torch.cuda.set_device(local_rank)`")
