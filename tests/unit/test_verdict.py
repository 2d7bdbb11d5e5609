"""The verdict is pure: tables of facts in, status and warning codes out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from probe_wire.records import DeviceRecord, RuntimeRecord
from sidecar.verdict import (
    RULES,
    GpuFacts,
    HysteresisState,
    ProcessFacts,
    ProcGpu,
    RecentSample,
    Rules,
    decide,
    map_cuda_index,
    memory_growth,
    settle,
)
from tests.helpers.verdict_facts import (
    CPU_RT,
    CUDA_RT,
    INTEL_CARD,
    NVIDIA_CARD,
    en,
    facts,
    idle_recent,
    model,
    proc,
    zh,
)
from tests.helpers.verdict_tables import (
    CASES,
    EFFICIENCY_CASES,
    job,
    steps,
)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_verdict_table(case):
    _, f, status, present, absent = case
    v = decide(f)
    codes = {w.code for w in v.warnings}
    assert v.status == status, en(v.message)
    assert present <= codes, f"missing {present - codes}; got {codes}"
    assert not (absent & codes), f"unexpected {absent & codes}"
    assert en(v.message) and zh(v.message)
    for w in v.warnings:
        assert w.severity in ("error", "warning", "info")
        assert en(w.message) and zh(w.message) and w.hint and en(w.hint) and zh(w.hint)


def test_every_rule_is_exercised_by_the_table():
    fired = set()
    for _, f, *_ in CASES + EFFICIENCY_CASES:
        fired |= {w.code for w in decide(f).warnings}
    produced = set()
    for rule in RULES:
        for _, f, *_ in CASES + EFFICIENCY_CASES:
            produced |= {w.code for w in rule(f)}
    assert produced == fired
    assert len(fired) >= len(RULES) - 1  # memory-growth has its own tests below


def test_job_stopped_says_which_process_for_how_long_and_how_to_resume_it():
    f = facts(proc(models=[model("cuda:0")]), proc(101, is_target=False), stopped=((101, 7.4), (100, 31.6)))
    (w,) = [w for w in decide(f).warnings if w.code == "job-stopped"]
    assert w.pids == (101, 100) and "The job is stopped (process 101, 100, for 32 s at least)" in en(w.message)
    assert "至少 32 秒" in zh(w.message) and "kill -CONT 101" in en(w.hint) and "kill -CONT 101" in zh(w.hint)
    (w,) = [w for w in decide(replace(f, stopped=((101, 7.4),))).warnings if w.code == "job-stopped"]
    assert en(w.message).startswith("1 process(es) of the job are stopped (process 101, for 7 s")


def test_warnings_sorted_by_severity():
    v = decide(facts(proc(runtime=CPU_RT, models=[model("cpu")]), system=(INTEL_CARD, NVIDIA_CARD)))
    order = [w.severity for w in v.warnings]
    assert order == sorted(order, key={"error": 0, "warning": 1, "info": 2}.get)
    assert v.warnings[0].code == "cpu-build"


def test_gpu_message_names_the_device_and_utilisation():
    msg = en(decide(facts(proc(models=[model("cuda:0")]))).message)
    assert "cuda:0" in msg and "NVIDIA H200" in msg and "80%" in msg
    assert decide(facts(proc(models=[model("cuda:0")]))).model_gpu_index == 0


def test_cpu_message_says_why():
    assert "CPU-only build" in en(decide(facts(proc(runtime=CPU_RT, models=[model("cpu")]))).message)
    assert "not moved" in en(decide(facts(proc(models=[model("cpu")]))).message)


@pytest.mark.parametrize(
    "model_kw, breakdown, named",
    [
        pytest.param({"wait": 0.8, "batches": 64}, None, "80%", id="the loader over 64 batches"),
        pytest.param({"wait": 0.8, "batches": 4}, None, None, id="the loader over too few batches"),
        pytest.param({"wait": 0.8}, None, None, id="the loader over batches not known"),
        pytest.param({}, steps(0.7), "70%", id="the step breakdown over 20 steps"),
        pytest.param({"wait": 0.8, "batches": 64}, steps(0.7, n=4), "80%", id="too few steps: the loader"),
        pytest.param({}, steps(0.45), None, id="the step breakdown under the threshold"),
    ],
)
def test_idle_hint_names_data_loading_over_the_evidence_data_starved_needs(model_kw, breakdown, named):
    """Issue 39 item 14: it quoted a loader's wait over its first batches (the workers' start), where
    data-starved waits for `data_starved_min_steps` steps or batches; now both ask the same."""
    f = facts(proc(models=[model("cuda:0", **model_kw)], steps=breakdown), recent=idle_recent(0.0))
    found = {w.code: w for w in decide(f).warnings}
    hint = en(found["idle-gpu"].hint)
    if named is None:
        assert hint.startswith("Likely causes") and "data-starved" not in found
    else:
        assert f"the next batch {named} of the time" in hint and "num_workers" in hint
        assert f"waits for data {named}" in en(found["data-starved"].message)


@pytest.mark.parametrize(
    "runtime, index, expected",
    [
        ({"devices": [{"index": 0, "uuid": "GPU-bbbb"}]}, 0, 1),  # by UUID, whatever the order
        ({"cuda_visible_devices": "1"}, 0, 1),  # renumbered by CUDA_VISIBLE_DEVICES
        ({"cuda_visible_devices": "GPU-bb"}, 0, 1),  # UUID prefix in CUDA_VISIBLE_DEVICES
        ({"cuda_visible_devices": "0"}, 1, None),  # cuda:1 does not exist
        ({}, 1, 1),
        ({}, 5, None),
        ({"devices": [{"index": 0, "uuid": "GPU-cccc"}], "cuda_visible_devices": "1"}, 0, 1),  # no such UUID
        ({"devices": [{"index": 0, "uuid": " gpu-DDDD "}]}, 0, 2),  # the first of a repeated UUID
    ],
)
def test_map_cuda_index(runtime, index, expected):
    gpus = (GpuFacts(0, uuid="GPU-aaaa"), GpuFacts(1, uuid="GPU-bbbb"), GpuFacts(2, uuid="GPU-dddd"), GpuFacts(3, uuid="GPU-dddd"))
    devices = tuple(DeviceRecord(d["index"], "", d["uuid"]) for d in runtime.get("devices", ()))
    rt = RuntimeRecord(**{**runtime, "devices": devices})
    assert map_cuda_index(ProcessFacts(1, runtime=rt), index, gpus) == expected


def test_map_cuda_index_looks_a_uuid_up_in_the_devices_it_is_given():
    """The UUIDs' indices are made once for the very same devices: a new poll's are looked in."""
    proc = ProcessFacts(1, runtime=RuntimeRecord(devices=(DeviceRecord(0, "", "GPU-bbbb"),)))
    first = (GpuFacts(0, uuid="GPU-aaaa"), GpuFacts(1, uuid="GPU-bbbb"))
    assert map_cuda_index(proc, 0, first) == 1
    assert map_cuda_index(proc, 0, (GpuFacts(0, uuid="GPU-bbbb"), GpuFacts(1, uuid="GPU-aaaa"))) == 0
    assert map_cuda_index(proc, 0, first) == 1


def _series(values, step_s=10.0):
    return tuple(RecentSample(i * step_s, 0.0, v, 0, None) for i, v in enumerate(values))


@pytest.mark.parametrize(
    "values, grows",
    [
        ([1000 + 60 * i for i in range(13)], True),  # steady growth over 120 s
        ([1000] * 13, False),
        ([1000, 3000] * 6 + [1000], False),  # saw-tooth: allocator churn, not a leak
        ([1000 + 5 * i for i in range(13)], False),  # too little to matter
        ([1000, 1500, 2000], False),  # too short a span
    ],
)
def test_memory_growth(values, grows):
    assert (memory_growth(_series(values), Rules()) is not None) is grows


def test_memory_growth_warning():
    f = facts(
        proc(models=[model("cuda:0")], gpu=[ProcGpu(0, 2000, 50)]),
        recent=_series([1000 + 60 * i for i in range(13)]),
    )
    assert "memory-growth" in {w.code for w in decide(f).warnings}


def test_hysteresis_holds_a_warning_for_a_few_polls():
    """A wait hovering about the threshold (0.5; released under 0.4) does not flap."""
    over, under = (job(steps=steps(w)) for w in (0.6, 0.45))
    state = HysteresisState()
    shown = []
    for f in [over, under, over, under, under, under, under]:
        v2, state = settle(state, decide(f), Rules(hysteresis_off_polls=3), facts=f)
        shown.append("data-starved" in {w.code for w in v2.warnings})
    assert shown == [True, True, True, True, True, False, False]


def test_a_held_warning_goes_at_once_when_its_processes_exited():
    """Issue 11: worker-cuda stayed for polls after its worker exited (workers recreated per epoch)."""
    trainer = proc(models=[model("cuda:0", inp="cuda:0")])
    worker = proc(201, role="dataloader-worker", is_target=False, gpu=[ProcGpu(0, 500, 0)])
    with_worker = decide(facts(trainer, worker))
    assert "worker-cuda" in {w.code for w in with_worker.warnings}
    state = HysteresisState()
    _, state = settle(state, with_worker, Rules(hysteresis_off_polls=3), {100, 201})
    v2, _ = settle(state, decide(facts(trainer)), Rules(hysteresis_off_polls=3), {100})
    assert "worker-cuda" not in {w.code for w in v2.warnings}
    v3, _ = settle(state, decide(facts(trainer)), Rules(hysteresis_off_polls=3), {100, 201})
    assert "worker-cuda" in {w.code for w in v3.warnings}  # still held while the worker lives


def test_cpu_build_names_the_trainer_not_its_workers():
    workers = [proc(200 + i, runtime=CPU_RT, role="dataloader-worker", is_target=False) for i in range(4)]
    v = decide(facts(proc(runtime=CPU_RT, models=[model("cpu")]), *workers))
    assert [w.pids for w in v.warnings if w.code == "cpu-build"] == [(100,)]


# A cu124 torch in a container started with NVIDIA_DRIVER_CAPABILITIES=utility: NVML answers,
# libcuda.so.1 is not there, and the probe reports what torch would say.
NO_LIBCUDA_RT = replace(CUDA_RT, cuda_available=False, devices=(), cuda_driver_loadable=False)


def test_nvml_without_the_cuda_driver_library_is_cuda_unavailable_not_model_on_cpu():
    v = decide(facts(proc(runtime=NO_LIBCUDA_RT, models=[model("cpu")])))
    codes = {w.code for w in v.warnings}
    assert "model-on-cpu" not in codes and "cpu-build" not in codes
    (w,) = [w for w in v.warnings if w.code == "cuda-unavailable"]
    assert w.severity == "error"
    assert "NVML sees 1 GPU(s), but the CUDA driver library (libcuda.so.1) does not load" in en(w.message)
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in en(w.hint) and "libcuda.so.1" in zh(w.message)
    assert v.status == "CPU" and "libcuda.so.1" in en(v.message)


def test_cuda_unavailable_names_the_processes_cpu_build_names():
    """Issue 39 item 19: cuda-unavailable listed the DataLoader workers among its pids, cpu-build
    did not. Both name the trainer, and the workers only when nothing else has that torch."""
    for rt, code in ((CPU_RT, "cpu-build"), (NO_LIBCUDA_RT, "cuda-unavailable")):
        workers = [proc(200 + i, runtime=rt, role="dataloader-worker", is_target=False) for i in range(2)]
        v = decide(facts(proc(runtime=rt, models=[model("cpu")]), *workers))
        assert [w.pids for w in v.warnings if w.code == code] == [(100,)], code
        alone = decide(facts(proc(1, runtime=None), *workers))
        assert [w.pids for w in alone.warnings if w.code == code] == [(200, 201)], code


def test_the_missing_driver_library_is_told_apart_from_hidden_gpus_and_an_old_driver():
    hidden = replace(NO_LIBCUDA_RT, cuda_visible_devices="")
    (w,) = [w for w in decide(facts(proc(runtime=hidden))).warnings if w.code == "cuda-unavailable"]
    assert "CUDA_VISIBLE_DEVICES" in en(w.message) and "libcuda" not in en(w.message)
    # A library that loads on a driver of an older CUDA: the driver's age, not the library.
    old = replace(NO_LIBCUDA_RT, cuda_build="13.0", cuda_driver_loadable=True)
    (w,) = [w for w in decide(facts(proc(runtime=old))).warnings if w.code == "cuda-unavailable"]
    assert "older than torch's CUDA 13.0" in en(w.message)
    # An older probe, which did not say: the generic reason, as before.
    unknown = replace(NO_LIBCUDA_RT, cuda_driver_loadable=None)
    (w,) = [w for w in decide(facts(proc(runtime=unknown))).warnings if w.code == "cuda-unavailable"]
    assert en(w.message) == "CUDA is not available to torch: torch cannot initialise CUDA."


def test_device_count_mismatch_with_a_cpu_only_build_names_the_hidden_nvidia_gpu():
    f = facts(proc(runtime=CPU_RT, models=[model("cpu")]), system=(INTEL_CARD, NVIDIA_CARD))
    (w,) = [w for w in decide(f).warnings if w.code == "device-count-mismatch"]
    message = en(w.message)
    assert "can use 0" in message and "Intel integrated graphics" in message and "1 NVIDIA GPU" in message
    assert w.severity == "warning" and "cannot use CUDA" in en(w.hint)


def test_a_garbage_collected_model_is_named_instead_of_no_model_registered():
    """Issue 12 item 10: probe.register(Net()) with nothing else keeping the model."""
    v = decide(facts(proc(collected_models=("Net",)), gpus=()))
    message = en(v.message)
    assert v.status == "UNKNOWN" and "Net was garbage-collected" in message
    assert "model = probe.register(" in message and "registered yet" not in message


def test_spawned_workers_on_the_gpu_get_a_hint_that_fits_them():
    """Issue 11 item 6: a spawned DataLoader worker without loader= was told to call register()."""
    worker = proc(301, runtime=None, role=None, is_target=False, gpu=[ProcGpu(0, 300, 0)], mp_child=True)
    v = decide(facts(proc(models=[model("cuda:0", inp="cuda:0")]), worker))
    hint = en(next(w.hint for w in v.warnings if w.code == "unregistered-gpu-process"))
    assert "loader=train_loader" in hint and "multiprocessing children" in hint


def test_mp_children_are_recognised_by_their_command_line():
    from sidecar.sources.lineage import is_mp_child

    # As read from /proc of real DataLoader workers (interpreter flags such as -B come first).
    spawn = ("python3", "-B", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=6, pipe_handle=11)")
    forkserver = ("python3", "-B", "-c", "from multiprocessing.forkserver import main; main(8, 9, ['__main__'], **{})")
    assert is_mp_child(spawn) and is_mp_child(forkserver)
    assert not is_mp_child(("python3", "train.py", "--epochs", "3")) and not is_mp_child(None)


@pytest.mark.parametrize(
    ("device", "visible", "role"),
    [("cuda:\u00b2", None, "main"), ("cuda:0", "\u00b2", "main"), ("cuda:\u00b2", None, "rank")],
    ids=["device", "cuda-visible-devices", "rank-device"],
)
def test_a_digit_that_int_refuses_does_not_stop_the_verdict(device, visible, role):
    """str.isdigit() is True for "²", int() refuses it: a process's odd device string must cost its
    own facts, never the verdict (which raised ValueError on every poll)."""
    rt = replace(CUDA_RT, device_count=2, devices=(), cuda_visible_devices=visible)
    p = proc(models=[model(device)], runtime=rt, role=role, local_rank=0 if role == "rank" else None)
    decide(facts(p))


def test_the_multiprocessing_flags_cache_keeps_no_long_command_line():
    """process_facts caches a command line's multiprocessing flags past the process's life: a
    process controls its command line (megabytes, up to ARG_MAX), so the cache keeps only the
    arguments the flags are read from, and only when they are short; the flags are those of the
    whole command line either way."""
    from types import SimpleNamespace

    from sidecar.poll.collect import _mp_flags, process_facts
    from sidecar.sources.lineage import is_mp_child, is_mp_helper

    def flags(cmdline):
        p = process_facts(SimpleNamespace(pid=5, ppid=1, depth=1, name="python3", cmdline=cmdline), None, (), 1)
        return p.mp_helper, p.mp_child

    code = "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=6, pipe_handle=11)"
    spawn = ("python3", "-B", "-c", code, "--multiprocessing-fork")
    long_tail = spawn + ("-", "-", "-") + ("x" * 100_000,) * 20  # 8 short arguments, then megabytes
    long_code = ("python3", "-c", code + " " * 200_000)
    for cmdline in (spawn, long_tail, long_code, ("python3", "train.py"), ()):
        assert flags(cmdline) == (is_mp_helper(cmdline), is_mp_child(cmdline)), cmdline[:3]
    _mp_flags.cache_clear()
    flags(long_tail)
    flags(spawn + ("-", "-", "-") + ("y" * 100_000,) * 20)  # another command line, the same 8 first
    assert _mp_flags.cache_info().hits == 1  # keyed on those arguments, not on the megabytes after
    flags(long_code)
    assert _mp_flags.cache_info().currsize == 1  # a long -c code is not kept


def test_settle_gives_the_verdict_itself_only_when_it_shows_exactly_its_warnings_in_severity_order():
    from sidecar.common.catalogue import ref
    from sidecar.verdict.rules import finding

    info = finding("a-note", "info", ref("warning.pid-namespace"), None)
    warn = finding("b-warning", "warning", ref("warning.pid-namespace"), None)
    base = decide(facts(proc(models=[model("cuda:0", inp="cuda:0")])))
    rules = Rules(hysteresis_off_polls=3)
    in_order = replace(base, warnings=(warn, info))
    same, state = settle(HysteresisState(), in_order, rules)
    assert same is in_order
    # Out of severity order: sorted, in a new verdict.
    unsorted = replace(base, warnings=(info, warn))
    v, _ = settle(HysteresisState(), unsorted, rules)
    assert v is not unsorted and v.warnings == (warn, info) and replace(v, warnings=unsorted.warnings) == unsorted
    # A warning held back from the last poll is shown too: a new verdict.
    held, _ = settle(state, replace(base, warnings=(info,)), rules)
    assert held.warnings == (warn, info)
