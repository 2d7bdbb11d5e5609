"""The verdict is pure: tables of facts in, status and warning codes out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sidecar.common.catalogue import render
from sidecar.verdict import (
    RULES,
    Facts,
    GpuFacts,
    HysteresisState,
    ModelFacts,
    ProcessFacts,
    ProcGpu,
    RecentSample,
    Rules,
    SystemGpuFacts,
    decide,
    map_cuda_index,
    memory_growth,
    settle,
)

CPU_RT = {"torch": "2.13.0+cpu", "cuda_build": None, "cuda_available": False, "device_count": 0}
CUDA_RT = {
    "torch": "2.5.1+cu124",
    "cuda_build": "12.4",
    "cuda_available": True,
    "device_count": 1,
    "devices": [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-aaaa"}],
}
TWO_GPU_RT = {**CUDA_RT, "device_count": 2}
H200 = GpuFacts(
    0, uuid="GPU-aaaa", name="NVIDIA H200", pci_bus_id="00000000:01:00.0", util=80.0, mem_used_mib=1000
)
NVIDIA_CARD = SystemGpuFacts("NVIDIA", "NVIDIA GPU", "0000:01:00.0", "nvidia", 0)
INTEL_CARD = SystemGpuFacts("Intel", "Intel integrated graphics", "0000:00:02.0", "i915", None)


def en(text):
    return render(text, "en")


def zh(text):
    return render(text, "zh")


def model(device, *, devices=None, inp=None, calls=10, name="Net", wait=None):
    devs = devices if devices is not None else ((device,) if device not in ("mixed", "no-parameters") else ())
    return ModelFacts(name, device, tuple(devs), 1000, inp, calls, 5.0, wait)


def proc(pid=100, *, runtime=CUDA_RT, models=(), gpu=(), role="main", is_target=True, **kw):
    return ProcessFacts(
        pid=pid,
        role=role,
        runtime=runtime,
        models=tuple(models),
        gpu=tuple(gpu),
        is_target=is_target,
        probe_state="ok" if runtime else "missing",
        **kw,
    )


def facts(*procs, gpus=(H200,), nvml_ok=True, system=(), **kw):
    return Facts(
        target_pid=procs[0].pid if procs else 100,
        processes=tuple(procs),
        gpus=tuple(gpus),
        nvml_ok=nvml_ok,
        driver="550.54" if nvml_ok else None,
        cuda_driver="12.4" if nvml_ok else None,
        nvml_error=None if nvml_ok else "NVML library not found",
        system_gpus=tuple(system),
        **kw,
    )


def idle_recent(util, calls_start=0, calls_end=100, span_s=12.0, n=9, steps=None):
    return tuple(
        RecentSample(
            1000.0 + i * span_s / (n - 1),
            util,
            500.0,
            calls_start + (calls_end - calls_start) * i // (n - 1),
            util,
            None if steps is None else steps[0] + (steps[1] - steps[0]) * i // (n - 1),
        )
        for i in range(n)
    )


def stepped(device="cuda:0", **kw):
    """A LightningModule as ProbeCallback reports it: steps counted, its own forward never called."""
    return replace(model(device, calls=0), train_steps=625, step_rate_hz=20.0, step_source="lightning", **kw)


CASES = [
    # id, facts, status, codes that must be present, codes that must be absent
    (
        "cpu model, cpu-only torch, NVIDIA GPU present",
        facts(proc(runtime=CPU_RT, models=[model("cpu")])),
        "CPU",
        {"cpu-build"},
        {"model-on-cpu"},
    ),
    (
        "cpu model on a cpu-only machine: no cpu-build nag",
        facts(proc(runtime=CPU_RT, models=[model("cpu")]), gpus=(), nvml_ok=False),
        "CPU",
        {"nvml-unavailable"},
        {"cpu-build", "model-on-cpu"},
    ),
    (
        "model on cuda:0",
        facts(proc(models=[model("cuda:0")], gpu=[ProcGpu(0, 900, 70)])),
        "GPU",
        set(),
        {"model-on-cpu", "input-mismatch", "no-probe"},
    ),
    (
        "gpu usable, model left on cpu",
        facts(proc(models=[model("cpu")])),
        "CPU",
        {"model-on-cpu"},
        {"cpu-build"},
    ),
    (
        "inputs left on the cpu",
        facts(proc(models=[model("cuda:0", inp="cpu")], gpu=[ProcGpu(0, 900, 70)])),
        "GPU",
        {"input-mismatch"},
        set(),
    ),
    (
        "parameters on two devices",
        facts(proc(models=[model("mixed", devices=("cpu", "cuda:0"))])),
        "MIXED",
        {"mixed-devices"},
        set(),
    ),
    (
        "two models on two device types",
        facts(proc(models=[model("cpu", name="A"), model("cuda:0", name="B")])),
        "MIXED",
        {"mixed-devices"},
        set(),
    ),
    ("no probe, no gpu work", facts(proc(runtime=None)), "UNKNOWN", {"no-probe"}, set()),
    (
        "no probe but a child does gpu work",
        facts(
            proc(runtime=None),
            proc(101, runtime=None, is_target=False, role=None, gpu=[ProcGpu(0, 2000, 50)]),
        ),
        "GPU",
        {"no-probe", "unregistered-gpu-process", "gpu-work-in-child"},
        set(),
    ),
    ("probe without a model", facts(proc()), "UNKNOWN", set(), {"no-probe"}),
    ("no-parameter model", facts(proc(models=[model("no-parameters")])), "UNKNOWN", {"no-parameters"}, set()),
    (
        "registered, then compiled inside a parent: its calls are not counted, and the verdict says why",
        facts(
            proc(
                models=[replace(model("cuda:0", calls=0), forward_rate_hz=0.0, compiled_uncounted=True)],
                gpu=[ProcGpu(0, 900, 70)],
            )
        ),
        "GPU",
        {"registered-before-compile"},
        set(),
    ),
    (
        "dataloader worker holds cuda memory",
        facts(
            proc(models=[model("cuda:0")], gpu=[ProcGpu(0, 900, 70)]),
            proc(101, role="dataloader-worker", is_target=False, gpu=[ProcGpu(0, 300, 0)]),
        ),
        "GPU",
        {"worker-cuda"},
        {"unregistered-gpu-process"},
    ),
    (
        "launcher with a training child on the gpu",
        facts(
            proc(runtime=None, role=None),
            proc(101, is_target=False, models=[model("cuda:0")], gpu=[ProcGpu(0, 900, 60)]),
        ),
        "GPU",
        {"gpu-work-in-child"},
        {"unregistered-gpu-process"},
    ),
    (
        "iGPU + dGPU laptop",
        facts(proc(models=[model("cuda:0")]), system=(INTEL_CARD, NVIDIA_CARD)),
        "GPU",
        {"device-count-mismatch"},
        set(),
    ),
    (
        "only the dGPU: no mismatch",
        facts(proc(models=[model("cuda:0")]), system=(NVIDIA_CARD,)),
        "GPU",
        set(),
        {"device-count-mismatch"},
    ),
    (
        "cuda build hidden by CUDA_VISIBLE_DEVICES",
        facts(
            proc(
                runtime={**CUDA_RT, "cuda_available": False, "device_count": 0, "cuda_visible_devices": ""},
                models=[model("cpu")],
            )
        ),
        "CPU",
        {"cuda-unavailable"},
        {"model-on-cpu"},
    ),
    (
        "driver older than torch's cuda",
        replace(
            facts(
                proc(
                    runtime={**CUDA_RT, "cuda_available": False, "cuda_build": "12.8"}, models=[model("cpu")]
                )
            ),
            cuda_driver="12.2",
        ),
        "CPU",
        {"cuda-unavailable"},
        set(),
    ),
    (
        "target exited",
        replace(facts(proc(models=[model("cuda:0")])), target_alive=False),
        "GPU",
        {"target-exited"},
        set(),
    ),
    (
        "pid namespace",
        facts(proc(models=[model("cuda:0")]), pid_namespace_suspect=True),
        "GPU",
        {"pid-namespace"},
        set(),
    ),
    (
        "unreadable probe",
        facts(proc(runtime=None, probe_unreadable=True, probe_error="bad magic")),
        "UNKNOWN",
        {"probe-unreadable"},
        set(),
    ),
    (
        "probe cannot publish",
        facts(proc(runtime=None, publish_failure="SegmentError: payload needs 9000 bytes")),
        "UNKNOWN",
        {"probe-error"},
        set(),
    ),
    (
        "idle gpu while forward calls continue",
        facts(proc(models=[model("cuda:0")], gpu=[ProcGpu(0, 900, 0)]), recent=idle_recent(1.0)),
        "GPU",
        {"idle-gpu"},
        set(),
    ),
    (
        "busy gpu is not idle",
        facts(proc(models=[model("cuda:0")]), recent=idle_recent(60.0)),
        "GPU",
        set(),
        {"idle-gpu"},
    ),
    (
        "idle but no forward calls: paused, not starved",
        facts(proc(models=[model("cuda:0")]), recent=idle_recent(0.0, 50, 50)),
        "GPU",
        set(),
        {"idle-gpu"},
    ),
    (
        "idle for too short a time",
        facts(proc(models=[model("cuda:0")]), recent=idle_recent(0.0, span_s=4.0)),
        "GPU",
        set(),
        {"idle-gpu"},
    ),
    (
        "idle gpu while training steps continue, the module's own forward never called (Lightning)",
        facts(
            proc(models=[stepped()], gpu=[ProcGpu(0, 900, 0)]),
            recent=idle_recent(1.0, 34, 34, steps=(0, 625)),
        ),
        "GPU",
        {"idle-gpu"},
        set(),
    ),
    (
        "idle, forward calls move but no training step does: evaluating, not starved",
        facts(proc(models=[stepped()]), recent=idle_recent(0.0, 0, 100, steps=(625, 625))),
        "GPU",
        set(),
        {"idle-gpu"},
    ),
    (
        "hogwild: a shared model and spawned children without the probe",
        facts(
            proc(runtime=CPU_RT, models=[replace(model("cpu", name="hog", calls=0), shared_memory=True)]),
            proc(201, runtime=None, role=None, is_target=False, ppid=100),
            proc(202, runtime=None, role=None, is_target=False, ppid=100, mp_helper=True),
            gpus=(),
            nvml_ok=False,
        ),
        "CPU",
        {"shared-model-unprobed-child"},
        set(),
    ),
    (
        "hogwild under fork: the children run the probe and count their calls",
        facts(
            proc(runtime=CPU_RT, models=[replace(model("cpu", name="hog"), shared_memory=True)]),
            proc(201, runtime=CPU_RT, role="child", is_target=False, ppid=100, models=[model("cpu", name="hog")]),
            gpus=(),
            nvml_ok=False,
        ),
        "CPU",
        set(),
        {"shared-model-unprobed-child"},
    ),
    (
        "a model not in shared memory: its children are none of its business",
        facts(
            proc(runtime=CPU_RT, models=[model("cpu")]),
            proc(201, runtime=None, role=None, is_target=False, ppid=100),
            gpus=(),
            nvml_ok=False,
        ),
        "CPU",
        set(),
        {"shared-model-unprobed-child"},
    ),
    (
        "two ranks on one gpu",
        facts(
            proc(runtime=None, role=None),
            proc(
                101, role="rank", is_target=False, local_rank=0, models=[model("cuda:0")], runtime=TWO_GPU_RT
            ),
            proc(
                102, role="rank", is_target=False, local_rank=1, models=[model("cuda:0")], runtime=TWO_GPU_RT
            ),
        ),
        "GPU",
        {"rank-shared-gpu", "rank-device-mismatch"},
        set(),
    ),
    (
        "a stopped job (kill -STOP): its last figures are not a healthy job",
        facts(proc(models=[model("cuda:0")], gpu=[ProcGpu(0, 900, 70)]), stopped=((100, 12.0),)),
        "GPU",
        {"job-stopped"},
        set(),
    ),
    (
        "a stopped job that has exited since: only target-exited",
        facts(proc(models=[model("cuda:0")]), stopped=((100, 12.0),), target_alive=False),
        "GPU",
        {"target-exited"},
        {"job-stopped"},
    ),
]


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
    from tests.unit.test_verdict_efficiency import EFFICIENCY_CASES

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


def test_idle_hint_names_data_loading_when_loader_timing_says_so():
    f = facts(proc(models=[model("cuda:0", wait=0.8)]), recent=idle_recent(0.0))
    (w,) = [w for w in decide(f).warnings if w.code == "idle-gpu"]
    assert "80%" in en(w.hint) and "num_workers" in en(w.hint)


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
    assert map_cuda_index(ProcessFacts(1, runtime=runtime), index, gpus) == expected


def test_map_cuda_index_looks_a_uuid_up_in_the_devices_it_is_given():
    """The UUIDs' indices are made once for the very same devices: a new poll's are looked in."""
    proc = ProcessFacts(1, runtime={"devices": [{"index": 0, "uuid": "GPU-bbbb"}]})
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
    with_w = decide(facts(proc(models=[model("cuda:0", inp="cpu")])))
    without = decide(facts(proc(models=[model("cuda:0", inp="cuda:0")])))
    state = HysteresisState()
    shown = []
    for v in [with_w, without, with_w, without, without, without, without]:
        v2, state = settle(state, v, Rules(hysteresis_off_polls=3))
        shown.append("input-mismatch" in {w.code for w in v2.warnings})
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
NO_LIBCUDA_RT = {**CUDA_RT, "cuda_available": False, "devices": [], "cuda_driver_loadable": False}


def test_nvml_without_the_cuda_driver_library_is_cuda_unavailable_not_model_on_cpu():
    v = decide(facts(proc(runtime=NO_LIBCUDA_RT, models=[model("cpu")])))
    codes = {w.code for w in v.warnings}
    assert "model-on-cpu" not in codes and "cpu-build" not in codes
    (w,) = [w for w in v.warnings if w.code == "cuda-unavailable"]
    assert w.severity == "error"
    assert "NVML sees 1 GPU(s), but the CUDA driver library (libcuda.so.1) does not load" in en(w.message)
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in en(w.hint) and "libcuda.so.1" in zh(w.message)
    assert v.status == "CPU" and "libcuda.so.1" in en(v.message)


def test_the_missing_driver_library_is_told_apart_from_hidden_gpus_and_an_old_driver():
    hidden = {**NO_LIBCUDA_RT, "cuda_visible_devices": ""}
    (w,) = [w for w in decide(facts(proc(runtime=hidden))).warnings if w.code == "cuda-unavailable"]
    assert "CUDA_VISIBLE_DEVICES" in en(w.message) and "libcuda" not in en(w.message)
    # A library that loads on a driver of an older CUDA: the driver's age, not the library.
    old = {**NO_LIBCUDA_RT, "cuda_build": "13.0", "cuda_driver_loadable": True}
    (w,) = [w for w in decide(facts(proc(runtime=old))).warnings if w.code == "cuda-unavailable"]
    assert "older than torch's CUDA 13.0" in en(w.message)
    # An older probe, which did not say: the generic reason, as before.
    unknown = {k: v for k, v in NO_LIBCUDA_RT.items() if k != "cuda_driver_loadable"}
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
    rt = {**CUDA_RT, "device_count": 2, "devices": [], "cuda_visible_devices": visible}
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
