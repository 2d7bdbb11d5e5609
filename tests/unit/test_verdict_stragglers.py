"""straggler-rank (sidecar/verdict/stragglers.py): the rank the others wait for, and why, from each
rank's step breakdown; table-driven over facts, as the collector hands them to the verdict."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest

from probe_wire.records import DeviceRecord, RuntimeRecord
from sidecar.documents.contract import check
from sidecar.documents.document import status_document
from sidecar.poll.collect import TargetInfo
from sidecar.verdict import GpuFacts, RecentSample, StepBreakdown, decide
from sidecar.verdict.stragglers import rank_waits, straggler_candidate
from tests.helpers.verdict_facts import en, facts, model, proc, zh

# A balanced rank's step: 10 % data wait, 30 % forward, 10 % optimizer, backward and all-reduce 40 %.
BALANCED = dict(
    data_wait_fraction=0.10, forward_fraction=0.30, optimizer_fraction=0.10, backward_fraction=0.40
)


def gpu(index, reasons=(), clock_mhz=1980):
    return GpuFacts(
        index,
        uuid=f"GPU-{index}",
        util=90.0,
        mem_used_mib=1000,
        sm_clock_mhz=clock_mhz,
        sm_clock_max_mhz=1980,
        clock_event_reasons=tuple(reasons),
    )


def rank(r, steps=40, **fractions):
    """Rank r's process, its model on cuda:r, with its step breakdown."""
    parts = {**BALANCED, **fractions}
    breakdown = StepBreakdown(window_s=10.0, steps=steps, step_s=0.25, other_fraction=0.1, **parts)
    rt = RuntimeRecord(torch="2.5.1+cu124", cuda_available=True, device_count=4)
    return proc(
        200 + r,
        runtime=rt,
        role="rank",
        rank=r,
        local_rank=r,
        world_size=4,
        is_target=False,
        models=(model(f"cuda:{r}"),),
        steps=breakdown,
    )


def slow(r, world=4, steps=40, **straggler):
    """A job of `world` ranks where rank r arrives late by 20 % of the step: the others wait in their
    backward, r spends that much more in `straggler`'s phase."""
    out = []
    for i in range(world):
        if i == r:
            out.append(rank(i, steps, **straggler))
        else:
            out.append(rank(i, steps, backward_fraction=0.60))
    return out


def confirmed_polls(candidate_rank, times=(100.0, 102.5)):
    return tuple(RecentSample(t, 0.0, 0.0, 0, None, None, (candidate_rank, "x")) for t in times)


def job(ranks, gpus=None, recent=None, **kw):
    gpus = gpus if gpus is not None else tuple(gpu(i) for i in range(len(ranks)))
    root = proc(100, role="main", is_target=True, runtime=RuntimeRecord(torch="2.5.1"))
    f = facts(root, *ranks, gpus=gpus, **kw)
    if recent is None:
        cand = straggler_candidate(f)
        recent = confirmed_polls(cand.rank) if cand is not None else ()
    return f.with_recent(recent)


def stragglers(f):
    return [w for w in decide(f).warnings if w.code == "straggler-rank"]


DATA_SLOW = dict(data_wait_fraction=0.30, backward_fraction=0.40)
FORWARD_SLOW = dict(forward_fraction=0.50, backward_fraction=0.40)
OPT_SLOW = dict(optimizer_fraction=0.30, backward_fraction=0.40)
THROTTLED = [gpu(0), gpu(1), gpu(2, ("hw_thermal_slowdown",), 1100), gpu(3)]

# (case, ranks, gpus, expected (rank, cause) or None)
CASES = [
    ("balanced", [rank(i) for i in range(4)], None, None),
    ("balanced with noise", [rank(i, backward_fraction=0.40 + 0.02 * i) for i in range(4)], None, None),
    ("data wait, rank 1 of 2", slow(1, world=2, **DATA_SLOW), None, (1, "data-wait")),
    ("data wait, rank 3 of 4", slow(3, **DATA_SLOW), None, (3, "data-wait")),
    ("forward, rank 0 of 4", slow(0, **FORWARD_SLOW), None, (0, "forward")),
    ("optimizer, rank 2 of 4", slow(2, **OPT_SLOW), None, (2, "optimizer")),
    ("throttled GPU, rank 2", slow(2, **FORWARD_SLOW), THROTTLED, (2, "throttled-gpu")),
    ("throttled GPU, no phase stands out", slow(2, backward_fraction=0.40), THROTTLED, (2, "throttled-gpu")),
    ("nothing stands out", slow(1, backward_fraction=0.40), None, (1, "other")),
    ("data wait beats a throttled GPU", slow(2, **DATA_SLOW), THROTTLED, (2, "data-wait")),
    (
        "every GPU throttled alike",
        slow(2, **FORWARD_SLOW),
        [gpu(i, ("hw_slowdown",)) for i in range(4)],
        (2, "forward"),
    ),
    (
        "two slow ranks: nobody alone",
        [
            rank(0, **FORWARD_SLOW),
            rank(1, **FORWARD_SLOW),
            rank(2, backward_fraction=0.6),
            rank(3, backward_fraction=0.6),
        ],
        None,
        None,
    ),
    ("fewer than 30 steps", slow(1, steps=29, **DATA_SLOW), None, None),
    ("one rank", [rank(0, **DATA_SLOW)], None, None),
]


@pytest.mark.parametrize(("case", "ranks", "gpus", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_straggler_and_its_cause(case, ranks, gpus, expected):
    f = job(ranks, gpus)
    found = stragglers(f)
    if expected is None:
        assert found == []
        return
    r, cause = expected
    assert len(found) == 1
    w = found[0]
    assert w.severity == "warning"
    assert w.message.params["rank"] == r
    assert w.message.params["cause"].id == f"straggler-cause.{cause}"
    assert w.hint.id == f"hint.straggler-rank.{cause}"
    assert w.pids[0] == 200 + r  # the straggler first, then the ranks that wait for it
    assert sorted(w.pids[1:]) == [200 + i for i in range(len(ranks)) if i != r]
    text = en(w.message)
    assert f"Rank {r} (pid {200 + r}, GPU {r})" in text and "20%" in text and "40 steps" in text
    assert "{" not in zh(w.message) and "{" not in en(w.hint)


def test_the_throttled_cause_names_the_gpu_reason_and_clock():
    (w,) = stragglers(job(slow(2, **FORWARD_SLOW), THROTTLED))
    assert "a throttled GPU (GPU 2: hardware thermal slowdown, SM clock 1100 MHz)" in en(w.message)


def test_an_amd_gpu_is_named_with_its_gpu_clock():
    """A ROCm job's ranks on AMD GPUs (`cuda:N` in a ROCm build): "SM clock" is NVIDIA's word."""
    pcis = [f"0000:{0x10 + i:02x}:00.0" for i in range(4)]
    devices = tuple(DeviceRecord(i, "AMD Instinct MI300X", None, pcis[i]) for i in range(4))
    rocm = RuntimeRecord(
        torch="2.5.1+rocm6.2", hip_build="6.2.41133", cuda_available=True, device_count=4, devices=devices
    )
    ranks = [dataclasses.replace(p, runtime=rocm) for p in slow(2, **FORWARD_SLOW)]
    gpus = [dataclasses.replace(g, vendor="amd", pci_bus_id=pcis[g.index]) for g in THROTTLED]
    (w,) = stragglers(job(ranks, gpus))
    assert "a throttled GPU (GPU 2: hardware thermal slowdown, GPU clock 1100 MHz)" in en(w.message)
    assert "GPU 时钟 1100 MHz" in zh(w.message)


def test_the_rank_is_named_with_the_node_its_probe_reports():
    ranks = [dataclasses.replace(p, hostname=f"gpu-node-0{p.rank}") for p in slow(2, **FORWARD_SLOW)]
    (w,) = stragglers(job(ranks))
    assert "Rank 2 (pid 202, node gpu-node-02, GPU 2)" in en(w.message)


def test_a_single_poll_reports_nothing():
    ranks = slow(1, **DATA_SLOW)
    assert stragglers(job(ranks, recent=confirmed_polls(1, times=(100.0,)))) == []
    assert stragglers(job(ranks, recent=())) == []


def test_polls_closer_than_the_confirmation_report_nothing():
    assert stragglers(job(slow(1, **DATA_SLOW), recent=confirmed_polls(1, times=(100.0, 101.0)))) == []


def test_a_poll_that_named_another_rank_in_between_starts_the_confirmation_again():
    recent = (
        *confirmed_polls(1, times=(96.0,)),
        *confirmed_polls(2, times=(98.0,)),
        *confirmed_polls(1, times=(100.0, 101.5)),
    )
    assert stragglers(job(slow(1, **DATA_SLOW), recent=recent)) == []
    longer = (*recent, *confirmed_polls(1, times=(102.0,)))
    assert len(stragglers(job(slow(1, **DATA_SLOW), recent=longer))) == 1


def test_rank_waits_are_each_ranks_backward_over_the_least():
    waits = rank_waits(job(slow(3, **DATA_SLOW)))
    assert [w.rank for w in waits] == [0, 1, 2, 3]
    assert [round(w.collective_wait_fraction, 6) for w in waits] == [0.2, 0.2, 0.2, 0.0]
    assert [w.gpu_index for w in waits] == [0, 1, 2, 3]


def test_ranks_without_a_backward_figure_are_left_out():
    old = replace(rank(1), steps=replace(rank(1).steps, backward_fraction=None))
    assert rank_waits(job([rank(0), old])) == ()
    assert rank_waits(job([rank(0), replace(rank(1), exited=True)])) == ()


def test_an_exited_target_gets_no_straggler():
    f = job(slow(1, **DATA_SLOW), target_alive=False)
    assert stragglers(f) == []


def test_the_status_document_lists_each_ranks_wait_within_the_contract():
    f = job(slow(3, **DATA_SLOW))
    doc = status_document(
        f,
        decide(f),
        time_s=103.0,
        interval_s=1.5,
        target=TargetInfo(100, "python", ["python", "train.py"], 90.0, 9000),
        proc_info={},
        other_processes={},
        events=[],
    )
    check(doc, "status")
    assert [w["rank"] for w in doc["rank_waits"]] == [0, 1, 2, 3]
    assert [round(w["collective_wait_fraction"], 6) for w in doc["rank_waits"]] == [0.2, 0.2, 0.2, 0.0]
    assert doc["rank_waits"][3] == {
        "rank": 3,
        "pid": 203,
        "steps": 40,
        "collective_wait_fraction": 0.0,
        "data_wait_fraction": 0.30,
        "forward_fraction": 0.30,
        "optimizer_fraction": 0.10,
        "gpu_index": 3,
    }
    assert any(w["code"] == "straggler-rank" for w in doc["warnings"])
    single = job([rank(0)])
    assert (
        status_document(
            single,
            decide(single),
            time_s=1.0,
            interval_s=1.5,
            target=TargetInfo(100, "python", ["python"], 0.0, 1),
            proc_info={},
            other_processes={},
            events=[],
        )["rank_waits"]
        is None
    )
