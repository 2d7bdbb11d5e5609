"""The simulated driver failing under a running sidecar: init refused, a GPU lost mid-run, queries
NOT_SUPPORTED, process lists growing between NVML's sizing call and its fill (INSUFFICIENT_SIZE).
The sidecar keeps polling and serving; what is missing is null, and the document says why."""

from __future__ import annotations

import re

import pytest

from tests.fakenvml import DEFAULT_FIELD_ERRORS, gpu
from tests.helpers.harness import API, METRICS_AT_ONCE, FakeJob, Sidecar, codes, cuda_runtime, wait_for

UUID0 = gpu(0)["uuid"]
TRAINER = {
    "payload": {
        "runtime": cuda_runtime([UUID0]),
        "models": [{"name": "Net", "class": "Net", "params": 10, "device": "cuda:0", "devices": ["cuda:0"]}],
    }
}


def poll_errors(sc: Sidecar) -> dict[str, float]:
    code, body = sc.get("/metrics")
    assert code == 200
    text = body.decode() if isinstance(body, bytes) else str(body)
    out = {}
    for m in re.finditer(
        r'^dsh_sidecar_poll_errors(?:_total)?\{[^}]*source="(\w+)"[^}]*\} (\S+)$', text, re.M
    ):
        out[m.group(1)] = float(m.group(2))
    return out


@pytest.mark.slow
def test_driver_faults_cost_fields_never_the_poll(tmp_path, fake_nvml, sidecar_env, sysfs_args):
    fake_nvml.write({"init_error": "NO_PERMISSION", "gpus": [gpu(0), gpu(1)]})
    with FakeJob(tmp_path / "job", {"main": TRAINER}) as job:
        busy = {"pid": job.pid, "used_mib": 4000, "sm_util": 80}
        with Sidecar(["--pid", str(job.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.2", *sysfs_args], env=sidecar_env) as sc:
            # 1. nvmlInit refused: served anyway, the verdict from the probe alone, the reason given.
            doc = sc.wait_status(lambda d: d["processes"] and d["processes"][0]["models"], what="first polls")
            assert doc["nvml"]["ok"] is False and "permission" in doc["nvml"]["error"].lower()
            assert doc["gpus"] == [] and "nvml-unavailable" in codes(doc) and doc["status"] == "GPU"
            code, health = sc.get("/healthz")
            assert code == 200 and health["ok"] is True
            assert poll_errors(sc).get("nvml", 0) >= 1
            # 2. The driver comes up (the source retries with backoff, no restart needed).
            fake_nvml.write(
                {"gpus": [gpu(0, util_gpu=80, memory_used_mib=4100, processes=[busy]), gpu(1, util_gpu=60)]}
            )
            doc = sc.wait_status(lambda d: d["nvml"]["ok"] and len(d["gpus"]) == 2, 20, what="NVML up")
            assert doc["gpus"][0]["util_pct"] == 80 and doc["gpus"][0]["field_errors"] == DEFAULT_FIELD_ERRORS
            nvidia = {"vendor": "nvidia", "pci_bus_id": doc["gpus"][0]["pci_bus_id"], "unknown_reason": None}
            assert doc["processes"][0]["gpu"] == [
                {"index": 0, "mem_used_mib": 4000, "sm_util_pct": 80, "mig_index": None, **nvidia}
            ]
            # 3. GPU 1 falls off the bus mid-run: its fields go null, GPU 0 is untouched.
            fake_nvml.write(
                {"gpus": [gpu(0, util_gpu=81, memory_used_mib=4100, processes=[busy]), gpu(1, lost=True)]}
            )
            doc = sc.wait_status(lambda d: d["gpus"][1]["lost"], what="GPU 1 lost")
            lost = doc["gpus"][1]
            assert lost["util_pct"] is None and lost["mem_used_mib"] is None and lost["mem_total_mib"] is None
            assert lost["uuid"] == gpu(1)["uuid"]  # the identity last seen stays
            assert any("lost" in why.lower() for why in lost["field_errors"].values()), lost
            assert doc["gpus"][0]["util_pct"] == 81 and doc["nvml"]["ok"] is True
            # 4. Queries NOT_SUPPORTED on GPU 0: each such field null, with NVML's reason.
            unsupported = [
                "utilization",
                "memory",
                "temperature",
                "power",
                "processes",
                "process_utilization",
            ]
            fake_nvml.write(
                {"gpus": [gpu(0, util_gpu=82, processes=[busy], not_supported=unsupported), gpu(1)]}
            )
            doc = sc.wait_status(
                lambda d: d["gpus"][0]["util_pct"] is None and not d["gpus"][1]["lost"], what="n/s"
            )
            g0 = doc["gpus"][0]
            assert g0["mem_used_mib"] is None and g0["mem_total_mib"] is None and g0["mem_util_pct"] is None
            for key in ("utilization", "memory", "processes"):
                assert g0["field_errors"].get(key) == "Not Supported", g0["field_errors"]
            assert doc["processes"][0]["gpu"] == []  # no process list: nothing attributed, nothing invented
            assert doc["status"] == "GPU" and doc["model_device"] == "cuda:0"  # the probe still answers
            # 5. Everything back: values again, no reasons left.
            fake_nvml.write({"gpus": [gpu(0, util_gpu=83, memory_used_mib=4100, processes=[busy]), gpu(1)]})
            doc = sc.wait_status(lambda d: d["gpus"][0]["util_pct"] == 83, what="recovered")
            assert doc["gpus"][0]["field_errors"] == DEFAULT_FIELD_ERRORS and doc["processes"][0]["gpu"]
            # Through all of it the poll kept its cadence and nothing escaped a poll.
            ts = [s["time_unix_s"] for s in sc.history()["samples"]]
            assert len(ts) >= 5 and all(b > a for a, b in zip(ts, ts[1:]))
            gaps = [b - a for a, b in zip(ts, ts[1:])]
            assert max(gaps) < 1.0, gaps  # 0.2 s polls, none skipped however the driver answered
            assert ts[-1] >= doc["time_unix_s"] - 0.5
            assert poll_errors(sc).get("poll", 0) == 0
            assert sc.get(f"{API}/history")[0] == 200 and sc.proc.poll() is None
            assert not [line for line in sc.err_lines if "Traceback" in line]


# The race, made deterministic: inside a process that loaded the simulated driver, the function
# pointer of the compute-process list is wrapped so that right after NVML answers "insufficient
# size" with the count needed, more processes appear than the 2n+5 buffer the reader then
# allocates. (The reader offers its last buffer first, so a race needs a list that outgrew it.)
RACE_SETUP = """
import pynvml
from sidecar.sources.nvml import NvmlSource
from tests.fakenvml import DEFAULT_FIELD_ERRORS, gpu, write_scenario
import os
PATH = os.environ["FAKE_NVML_SCENARIO"]
def procs(n):
    return [{"pid": 200000 + i, "used_mib": 100 + i} for i in range(n)]
def scenario(n):
    return {"gpus": [gpu(0, util_gpu=50, processes=procs(n)), gpu(1, util_gpu=20)]}
RACES = {"left": 0, "n": 1}
_real = pynvml._nvmlGetFunctionPointer
def _patched(name):
    fn = _real(name)
    if name != "nvmlDeviceGetComputeRunningProcesses_v3":
        return fn
    def racing(handle, count, buf):
        ret = fn(handle, count, buf)
        if ret == pynvml.NVML_ERROR_INSUFFICIENT_SIZE and RACES["left"] > 0:
            # NVML has told how many there are: processes start now
            RACES["left"] -= 1
            RACES["n"] = RACES["n"] * 2 + 6
            write_scenario(PATH, scenario(RACES["n"]))
        return ret
    return racing
pynvml._nvmlGetFunctionPointer = _patched
write_scenario(PATH, scenario(1))
src = NvmlSource()
def grow(n):
    RACES["n"] = n
    write_scenario(PATH, scenario(n))
def poll():
    snap = src.poll()
    g0, g1 = snap.devices
    errors0 = {k: v for k, v in g0.field_errors.items() if k not in DEFAULT_FIELD_ERRORS}  # GPM: an A100
    return {"ok": snap.ok, "call_errors": snap.call_errors, "errors0": errors0,
            "pids0": sorted(p.pid for p in g0.processes), "util0": g0.util_gpu, "util1": g1.util_gpu,
            "n": RACES["n"]}
result = poll()
"""


def test_insufficient_size_race_is_retried_and_a_persistent_one_costs_one_field(fake_nvml):
    fake_nvml.write({"gpus": []})
    with fake_nvml.worker() as w:
        first = w(RACE_SETUP)
        assert first["ok"] and first["pids0"] == [200000] and not first["call_errors"]
        # The first poll's buffer has room for 2*1+5 = 7: one more process than that outgrows it.
        # One race: the fill fails INSUFFICIENT_SIZE, the query is retried and gets every process.
        r = w("grow(8)\nRACES['left'] = 1\nresult = poll()")
        assert r["n"] == 22 and r["pids0"] == list(range(200000, 200022)), r
        assert r["ok"] and not r["call_errors"] and r["errors0"] == {}
        # The list fits the buffer it has now (2*22+5 = 49): one call, no race possible.
        r = w("grow(30)\nRACES['left'] = 1\nresult = poll()")
        assert r["n"] == 30 and len(r["pids0"]) == 30 and not r["call_errors"], r
        # Races on both tries (after each count, and after the first fill that fell short): this
        # poll loses the process list (with the reason), nothing else.
        r = w("RACES['left'] = 3\ngrow(50)\nresult = poll()")
        assert r["ok"] and r["pids0"] == [] and r["errors0"] == {"processes": "Insufficient Size"}, r
        assert "nvmlDeviceGetComputeRunningProcesses_v3" in r["call_errors"]
        assert r["util0"] == 50 and r["util1"] == 20
        # The next poll is whole again.
        r = w("result = poll()")
        assert r["ok"] and len(r["pids0"]) == r["n"] == 442 and r["errors0"] == {} and not r["call_errors"]


def test_a_driver_that_disappears_and_comes_back_under_load(tmp_path, fake_nvml, sidecar_env, sysfs_args):
    """The scenario file flips every ~50 ms between 8 GPUs, 0 GPUs, a lost GPU and unsupported
    queries while the sidecar polls every 0.1 s: every answer is a consistent document."""
    import threading
    import time

    scenarios = [
        {"gpus": [gpu(i, util_gpu=10 * i) for i in range(8)]},
        {"gpus": []},
        {"gpus": [gpu(0, lost=True), gpu(1)]},
        {"gpus": [gpu(0, not_supported=["utilization", "processes", "memory"]), gpu(1, util_gpu=5)]},
    ]
    fake_nvml.write(scenarios[0])
    stop = threading.Event()

    def flip():
        i = 0
        while not stop.is_set():
            i += 1
            fake_nvml.write(scenarios[i % len(scenarios)])
            time.sleep(0.05)

    with FakeJob(tmp_path / "job", {"main": TRAINER}) as job:
        with Sidecar(["--pid", str(job.pid), "--port", "0", *METRICS_AT_ONCE, "--interval", "0.1", *sysfs_args], env=sidecar_env) as sc:
            sc.wait_status(lambda d: d["nvml"]["ok"], what="first poll")
            flipper = threading.Thread(target=flip, daemon=True)
            flipper.start()
            try:
                seen = set()
                deadline = time.monotonic() + 4
                while time.monotonic() < deadline:
                    doc = sc.status()
                    seen.add(len(doc["gpus"]))
                    for g in doc["gpus"]:
                        if g["lost"] or g["util_pct"] is None:
                            assert g["util_pct"] is None and g["field_errors"], g
                    time.sleep(0.03)
            finally:
                stop.set()
                flipper.join()
            assert seen >= {0, 2, 8}, seen
            assert poll_errors(sc).get("poll", 0) == 0 and sc.proc.poll() is None
            wait_for(lambda: sc.get("/healthz")[0] == 200, what="healthz")
            assert not [line for line in sc.err_lines if "Traceback" in line]
