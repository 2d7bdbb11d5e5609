"""Issue 39 item 14: a held warning says this poll's figures and goes with its facts.

Hand-written polls per code, as a poller settles them (settle() given each poll's facts): raised at
the first with one figure; at the second its figure is just past the raise threshold but not past
the release value, so the warning is held, and says the second poll's figure; at the third its
evidence is gone, and so is the warning, though `hysteresis_off_polls` (3) would hold it a poll more.
The warnings whose figures have no release value (read exactly from the driver or the probe) go the
poll their evidence does. tests/unit/test_verdict_properties.py holds every held warning to this
over the tables' and random facts.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from sidecar.common.catalogue import load
from sidecar.verdict import Facts, GpuFacts, ProcGpu, RecentSample, Rules, Verdict, decide
from sidecar.verdict.codes import CODES, NOT_FROM_DECIDE
from sidecar.verdict.hysteresis import RELEASED_AT, UNHELD_CODES
from tests.helpers.verdict_facts import (
    INTEL_CARD,
    NVIDIA_CARD,
    en,
    facts,
    idle_recent,
    model,
    proc,
    settled_facts,
)
from tests.helpers.verdict_tables import HOPPER, job, ranks


def said(v: Verdict, code: str) -> str | None:
    """The English message of `code`'s warning in `v` and its hint, None when `v` has none."""
    found = [f"{en(w.message)} | {en(w.hint)}" for w in v.warnings if w.code == code]
    assert len(found) <= 1, found
    return found[0] if found else None


def idle(util: float, wait: float, calls_end: int = 100, span_s: float = 12.0) -> Facts:
    """A model on the GPU at `util` % over the recent polls, its loader waiting `wait` of 64 batches."""
    recent = idle_recent(util, calls_end=calls_end, span_s=span_s)
    return facts(proc(models=[model("cuda:0", wait=wait, batches=64)]), recent=recent)


def grown(growth_mib: float, saw: bool = False) -> Facts:
    """The job's GPU memory over 120 s, from 2000 MiB up by `growth_mib` in steady steps (in a
    saw-tooth: up and down by 3000 MiB, no leak at all)."""
    mem = [2000 + (3000.0 * (i % 2) if saw else growth_mib * i / 12) for i in range(13)]
    recent = tuple(RecentSample(1000 + 10.0 * i, 0.0, m, 10 * i, None) for i, m in enumerate(mem))
    return facts(proc(models=[model("cuda:0")], gpu=[ProcGpu(0, 2000, 50)]), recent=recent)


def hollow(util: float, sm: float, occupancy: float = 0.30) -> Facts:
    return job(gpu=replace(HOPPER, util=util, sm_activity_fraction=sm, sm_occupancy_fraction=occupancy))


def straggling(others_backward: float, slow_rank: int = 1, confirmed: bool = False) -> Facts:
    """Three ranks; `slow_rank` spends 0.3 of each step in its backward and all-reduce, the others
    `others_backward`: they wait the difference for it, each step. Without `confirmed`, the history
    never named a straggler (its samples name one at the raise threshold only)."""
    backward = [others_backward] * 3
    backward[slow_rank] = 0.3
    waits = [0.1] * 3
    waits[slow_rank] = 0.4
    return ranks(backward, waits, confirmed=confirmed)


def syncing(syncs: float) -> Facts:
    return job(syncs_per_step=syncs)


# code -> (three polls, what each says: the message and hint of the code's warning, or None)
HELD = {
    "idle-gpu": (
        [idle(0.0, 0.8), idle(6.0, 0.55, span_s=16.0), idle(20.0, 0.55)],
        [
            "below 5% busy for 10 s while forward calls continue. | Data loading starves the GPU: the loop "
            "waits for the next batch 80% of the time.",
            "below 8% busy for 12 s while forward calls continue. | Data loading starves the GPU: the loop "
            "waits for the next batch 55% of the time.",
            None,
        ],
    ),
    "idle-gpu, its forward calls stopped": (
        [idle(0.0, 0.8), idle(6.0, 0.2), idle(6.0, 0.2, calls_end=0)],
        [
            "below 5% busy for 10 s",
            "below 8% busy for 10 s while forward calls continue. | Likely causes",
            None,
        ],
    ),
    "memory-growth": (
        [grown(300.0), grown(220.0), grown(100.0)],
        ["2000 → 2300 MiB over the last 120 s", "2000 → 2220 MiB over the last 120 s", None],
    ),
    "memory-growth, a saw-tooth now": (
        [grown(300.0), grown(220.0), grown(0.0, saw=True)],
        ["2000 → 2300 MiB", "2000 → 2220 MiB", None],
    ),
    "hollow-utilisation": (
        [hollow(95.0, 0.10), hollow(78.0, 0.20, 0.11), hollow(95.0, 0.50)],
        [
            "GPU 0 reports 95% utilisation, but only 10% of its SMs are busy (30% occupancy)",
            "GPU 0 reports 78% utilisation, but only 20% of its SMs are busy (11% occupancy)",
            None,
        ],
    ),
    "hollow-utilisation, NVML's utilisation fell": (
        [hollow(95.0, 0.10), hollow(95.0, 0.27), hollow(60.0, 0.27)],
        ["95% utilisation, but only 10% of its SMs", "95% utilisation, but only 27% of its SMs", None],
    ),
    "straggler-rank": (
        [straggling(0.6, confirmed=True), straggling(0.38), straggling(0.35)],
        [
            "Rank 1 (pid 11) makes the other ranks wait 30% of each step, because of its data wait",
            "Rank 1 (pid 11) makes the other ranks wait 8% of each step, because of its data wait",
            None,
        ],
    ),
    "straggler-rank, another rank now": (
        [straggling(0.6, confirmed=True), straggling(0.38), straggling(0.38, slow_rank=0)],
        [
            "Rank 1 (pid 11) makes the other ranks wait 30%",
            "Rank 1 (pid 11) makes the other ranks wait 8%",
            None,
        ],
    ),
    "host-syncs": (
        [syncing(20.0), syncing(7.0), syncing(3.0)],
        ["the GPU 20 times per training step", "the GPU 7 times per training step", None],
    ),
}


@pytest.mark.parametrize("case", HELD, ids=list(HELD))
def test_a_held_warning_says_this_polls_figures_and_goes_with_its_facts(case: str) -> None:
    polls, expected = HELD[case]
    code = case.split(",")[0]
    assert code in RELEASED_AT
    # The second poll alone does not raise it: shown there, it is held.
    assert said(decide(polls[1]), code) is None
    shown = [said(v, code) for v in settled_facts(polls)]
    assert [s is not None for s in shown] == [e is not None for e in expected], shown
    for text, part in zip(shown, expected):
        assert part is None or (text is not None and part in text), (part, text)
    # Without this poll's facts (as before issue 39 item 14), the second poll said the first's figures.
    assert shown[1] != shown[0]


def test_a_held_warning_about_a_gpu_is_about_that_gpu_alone() -> None:
    """One process on two GPUs: GPU 0 was hollow, GPU 1 is just under the threshold now, GPU 0 no more.
    Held, it would have said GPU 1's figures as GPU 0's warning."""
    both = [ProcGpu(0, 900, 70), ProcGpu(1, 900, 70)]

    def two(gpu0: GpuFacts, gpu1: GpuFacts) -> Facts:
        return facts(proc(models=[model("cuda:0")], gpu=both), gpus=(gpu0, gpu1))

    busy = replace(HOPPER, util=95.0, sm_activity_fraction=0.9)
    was = two(replace(busy, sm_activity_fraction=0.10), replace(busy, index=1, uuid="GPU-1"))
    now = two(busy, replace(busy, index=1, uuid="GPU-1", util=78.0, sm_activity_fraction=0.2))
    shown = [said(v, "hollow-utilisation") for v in settled_facts([was, now])]
    assert shown[0] is not None and "GPU 0 reports 95%" in shown[0]
    assert shown[1] is None


# Warnings whose figures have no release value: raised at the first poll, gone at the second, where
# their evidence is (they were held a poll or two, saying the first poll's clock, link or count).
GONE_AT_ONCE = {
    "throttled": (
        job(gpu=replace(HOPPER, clock_event_reasons=("hw_thermal_slowdown",), sm_clock_mhz=1200)),
        job(gpu=HOPPER),
    ),
    "pcie-degraded": (
        job(
            gpu=replace(
                HOPPER, pcie_link_gen=1, pcie_link_gen_max=4, pcie_link_width=4, pcie_link_width_max=16
            )
        ),
        job(
            gpu=replace(
                HOPPER, pcie_link_gen=4, pcie_link_gen_max=4, pcie_link_width=16, pcie_link_width_max=16
            )
        ),
    ),
    "device-count-mismatch": (
        facts(proc(models=[model("cuda:0")]), system=(NVIDIA_CARD, INTEL_CARD)),
        facts(proc(models=[model("cuda:0")]), system=(NVIDIA_CARD,)),
    ),
    "probe-error": (
        facts(proc(models=[model("cuda:0")], publish_failure="payload too large")),
        facts(proc(models=[model("cuda:0")])),
    ),
}


@pytest.mark.parametrize("code", GONE_AT_ONCE)
def test_a_warning_read_exactly_goes_the_poll_its_evidence_does(code: str) -> None:
    before, after = GONE_AT_ONCE[code]
    assert code in UNHELD_CODES
    assert [said(v, code) is not None for v in settled_facts([before, after, after])] == [True, False, False]


# What a warning's text may name and still be held as it was raised: who and where (processes,
# models, a GPU and its compute capability, the job's runtime: its context and device type), never a
# figure of the poll that raised it.
NAMES = {"pid", "pids", "processes", "model", "gpu", "cc", "context", "device"}


def _placeholders(code: str) -> set[str]:
    texts = [t for k, t in load("en").items() if k.split(".")[:2] in (["warning", code], ["hint", code])]
    return {name for t in texts for name in re.findall(r"\{(\w+)\}", t)}


@pytest.mark.parametrize("code", sorted(set(CODES) - NOT_FROM_DECIDE))
def test_a_warning_whose_text_carries_a_figure_is_never_held_as_it_was_raised(code: str) -> None:
    """Every code decide() gives (the cluster view's two are not): one whose message or hint says a
    figure is either never held or held as this poll's facts have it (RELEASED_AT)."""
    assert not (code in UNHELD_CODES and code in RELEASED_AT)
    figures = _placeholders(code) - NAMES
    assert not figures or code in UNHELD_CODES or code in RELEASED_AT, (code, figures)


def test_each_release_value_lies_past_its_threshold_on_the_side_the_warning_goes() -> None:
    """A held warning stays while its figure is a little better than the raise threshold: a release
    value on the threshold's worse side would drop a warning the rule still raises."""
    rules = Rules()
    lower_is_worse = {"idle_util_pct", "hollow_sm_activity", "hollow_sm_occupancy"}
    for release in RELEASED_AT.values():
        for raised, at in release.thresholds:
            threshold, value = getattr(rules, raised), getattr(rules, at)
            assert (value > threshold) if raised in lower_is_worse else (value < threshold), (raised, at)
