"""The efficiency rules (sidecar/verdict/efficiency.py): tables of facts in, warning codes out.

Each warning has cases where it must fire and near misses where it must not (the software power cap
alone, an idle GPU's power-saving link, NVML utilisation that GPM confirms, bf16 or TF32, a window of
too few steps, no MIG).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sidecar.verdict import (
    LoaderSettings,
    ProcGpu,
    Rules,
    StepBreakdown,
    decide,
)
from tests.helpers.verdict_facts import (
    CPU_RT,
    en,
    facts,
    model,
    proc,
    zh,
)
from tests.helpers.verdict_tables import (
    EFFICIENCY_CASES,
    FP32_OFF,
    HOPPER,
    fp32,
    job,
    steps,
)


@pytest.mark.parametrize("case", EFFICIENCY_CASES, ids=[c[0] for c in EFFICIENCY_CASES])
def test_efficiency_table(case):
    _, f, present, absent = case
    v = decide(f)
    codes = {w.code for w in v.warnings}
    assert present <= codes, f"missing {present - codes}; got {codes}"
    assert not (absent & codes), f"unexpected {absent & codes}"
    assert v.status == "GPU", en(v.message)  # efficiency never changes where the compute goes
    for w in v.warnings:
        assert "{" not in en(w.message) + zh(w.message) + en(w.hint) + zh(w.hint), w.code


def _warning(f, code):
    (w,) = [w for w in decide(f).warnings if w.code == code]
    return w


def test_throttled_names_the_reason_clock_and_fix_in_both_languages():
    g = replace(
        HOPPER,
        clock_event_reasons=("sw_power_cap", "hw_thermal_slowdown"),
        sm_clock_mhz=885,
        temperature_c=92.0,
        power_w=410.0,
        power_limit_w=700.0,
    )
    w = _warning(job(gpu=g), "throttled")
    assert w.pids == (100,)
    text = en(w.message)
    assert "hardware thermal slowdown" in text and "885 MHz of 1980 MHz" in text and "92 °C" in text, text
    assert "410 W of 700 W" in text
    assert "硬件温控降频" in zh(w.message) and "fans" in en(w.hint) and "风扇" in zh(w.hint)


def test_data_starved_hint_quotes_the_loader_settings():
    m = replace(
        model("cuda:0"),
        loader_settings=LoaderSettings(num_workers=0, pin_memory=False, persistent_workers=False),
    )
    w = _warning(job(steps=steps(0.72), models=[m]), "data-starved")
    assert "72%" in en(w.message)
    assert "num_workers=0, pin_memory=False, persistent_workers=False" in en(w.hint)
    assert "num_workers=0" in zh(w.hint)


def _loader_hint(on_gpu=True, **settings) -> tuple[str, str]:
    m = replace(model("cuda:0" if on_gpu else "cpu"), loader_settings=LoaderSettings(**settings))
    f = (
        job(steps=steps(0.8), models=[m])
        if on_gpu
        else facts(proc(runtime=CPU_RT, models=[m], steps=steps(0.8)), gpus=())
    )
    w = _warning(f, "data-starved")
    return en(w.hint), zh(w.hint)


def test_data_starved_hint_suggests_only_what_is_not_already_set():
    """Issue 25: "set persistent_workers=True" to a loader that has it. Each suggestion is made only
    for a setting that is not there, in both languages."""
    text, zh_text = _loader_hint(num_workers=8, pin_memory=True, persistent_workers=False, prefetch_factor=4)
    assert "Set `persistent_workers=True`" in text and "`persistent_workers=True`" in zh_text
    for said in ("Raise `num_workers`", "Set `pin_memory=True`", "Raise `prefetch_factor`"):
        assert said not in text, text
    assert text.endswith(
        "prefetch_factor=4. Set `persistent_workers=True` (with workers). Or cache and preprocess the data."
    )
    text, _ = _loader_hint(num_workers=2, pin_memory=False, persistent_workers=True, prefetch_factor=2)
    assert "Raise `num_workers`" in text and "Set `pin_memory=True`" in text and "above 2" in text
    assert "Set `persistent_workers=True`" not in text
    # A probe that did not report prefetch_factor: nothing said of it beyond "?".
    text, _ = _loader_hint(num_workers=2, pin_memory=True, persistent_workers=True)
    assert "prefetch_factor=?" in text and "Raise `prefetch_factor`" not in text


def test_data_starved_with_every_setting_there_points_at_the_per_batch_work():
    for on_gpu in (True, False):
        text, zh_text = _loader_hint(
            on_gpu, num_workers=8, pin_memory=True, persistent_workers=True, prefetch_factor=4
        )
        assert "already has num_workers=8" in text and "per-batch work itself is slow" in text
        assert "`__getitem__`" in text and "collate_fn" in text and "`__getitem__`" in zh_text
        assert "Set `" not in text and "Raise `prefetch_factor`" not in text
        assert ("pin_memory" in text) is on_gpu


def test_data_starved_from_the_loader_timing_without_a_step_breakdown():
    m = model("cuda:0", wait=0.8, batches=Rules().data_starved_min_steps)
    w = _warning(job(models=[m]), "data-starved")
    assert "80%" in en(w.message) and "loader=" in en(w.hint)
    # Over fewer batches than a breakdown needs steps: nothing yet.
    few = replace(m, data_wait_batches=Rules().data_starved_min_steps - 1)
    assert "data-starved" not in {w.code for w in decide(job(models=[few])).warnings}


@pytest.mark.parametrize(
    "settings", [None, LoaderSettings(num_workers=0, pin_memory=False, persistent_workers=False)]
)
def test_data_starved_on_the_cpu_never_advises_pin_memory(settings):
    """pin_memory only speeds copies to an accelerator (torch warns when it is set without one): a
    CPU job starving for data is told about workers and caching only, in both languages."""
    on_cpu = replace(model("cpu"), loader_settings=settings)
    f = facts(proc(runtime=CPU_RT, models=[on_cpu], steps=steps(0.9)), gpus=())
    w = _warning(f, "data-starved")
    assert "pin_memory" not in en(w.hint) and "pin_memory" not in zh(w.hint), en(w.hint)
    assert "num_workers" in en(w.hint) and "num_workers" in zh(w.hint)
    on_gpu = replace(model("cuda:0"), loader_settings=settings)
    assert "pin_memory=True" in en(_warning(job(steps=steps(0.9), models=[on_gpu]), "data-starved").hint)


def test_hollow_and_pcie_texts_carry_the_figures():
    g = replace(HOPPER, util=97.0, sm_activity_fraction=0.12, sm_occupancy_fraction=0.04)
    text = en(_warning(job(gpu=g), "hollow-utilisation").message)
    assert "97%" in text and "12%" in text and "4%" in text, text
    g = replace(HOPPER, pcie_link_gen=1, pcie_link_gen_max=4, pcie_link_width=4, pcie_link_width_max=16)
    text = en(_warning(job(gpu=g), "pcie-degraded").message)
    assert "Gen1 x4" in text and "Gen4 x16" in text, text


def test_mig_is_unknown_not_idle():
    """On MIG, processes have no utilisation samples: the history sums stay unknown, so idle-gpu
    cannot mistake a MIG job for an idle one."""
    from sidecar.poll.samples import history_sample

    f = facts(
        proc(models=[model("cuda:0")], gpu=[ProcGpu(0, 900, None, mig_index=0)]),
        gpus=(replace(HOPPER, util=None, mig_mode=True),),
    )
    assert history_sample(1.0, f).recent.tree_sm_util is None
    f = facts(proc(models=[model("cuda:0")], gpu=[ProcGpu(0, 900, None)]), gpus=(HOPPER,))
    assert history_sample(1.0, f).recent.tree_sm_util == 0.0  # without MIG, no sample means idle


def test_a_degraded_link_counts_once_the_gpu_is_not_idle():
    """Without GPM's PCIe rates, a GPU above the idle threshold moves data: an idle one lowers its
    link to save power, a working one does not."""
    g = replace(
        HOPPER, util=20.0, pcie_link_gen=1, pcie_link_gen_max=4, pcie_link_width=16, pcie_link_width_max=16
    )
    assert "pcie-degraded" in {w.code for w in decide(job(gpu=g)).warnings}
    assert "pcie-degraded" not in {w.code for w in decide(job(gpu=replace(g, util=2.0))).warnings}


def test_a_hostile_payload_cannot_push_shares_out_of_range():
    """A process writes its own payload: shares are clamped into 0-1, counts and times at 0."""
    from sidecar.poll.collect import process_facts
    from sidecar.sources.segments import ProbeRead
    from tests.helpers.records import record_of

    class Proc:
        pid, ppid, depth, name, cmdline = 7, 1, 0, "python", None

    steps = {
        "window_s": -5.0,
        "steps": -3,
        "step_s": -1.0,
        "data_wait_fraction": 7.0,
        "forward_fraction": -2.0,
        "optimizer_fraction": None,
        "other_fraction": 0.25,
    }
    read = ProbeRead(7, "ok", record_of(7, steps=steps, syncs_per_step=-4.0), None, False)  # the schema lets these by
    p = process_facts(Proc, read, (), 7)
    assert p.steps == StepBreakdown(0.0, 0, 0.0, 1.0, 0.0, None, 0.25)
    assert p.syncs_per_step == 0.0


@pytest.mark.parametrize("cudnn_tf32", [True, False, None])
def test_no_tensor_cores_says_matmuls_and_asks_for_cudnn_tf32_only_where_it_was_turned_off(cudnn_tf32):
    """cuDNN's TF32 is on by default, so an fp32 conv net does use the tensor cores for its
    convolutions: the warning is about matmuls, and only a process that turned cuDNN's TF32 off is
    told to turn it on."""
    math = replace(FP32_OFF, cudnn_allow_tf32=cudnn_tf32)
    w = _warning(job(models=[fp32()], math=math), "no-tensor-cores")
    assert "matmuls" in en(w.message) and "矩阵乘" in zh(w.message)
    asks = "cudnn.allow_tf32 = True" in en(w.hint)
    assert asks == (cudnn_tf32 is False), en(w.hint)
    assert ("cudnn.allow_tf32 = True" in zh(w.hint)) == asks
