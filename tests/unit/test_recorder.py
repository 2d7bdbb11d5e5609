"""The runs recorder (sidecar/poll/recorder.py, issue 40): what a run's polls become in the ledger.

Driven with real facts, verdicts (verdict.decide) and history samples (samples.history_sample), and
through a real Poller over scripted sources; the ledger is an in-memory sink that keeps the batches
it is given (what is recorded is the point here, not how the ledger stores it). Figures are checked
against what the test computes from the polls it made.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from probe_wire.records import RuntimeRecord
from sidecar.common.runs import (
    LedgerBatch,
    MinuteFigures,
    RunDetail,
    RunIdentity,
    RunRecord,
    RunSetup,
    RunTotals,
    VerdictChange,
    run_key,
)
from sidecar.documents import contract
from sidecar.documents.document import history_document
from sidecar.poll.collect import TargetInfo
from sidecar.poll.poller import Poller
from sidecar.poll.recorder import WRITE_EVERY_S, Recording
from sidecar.poll.run_figures import run_setup
from sidecar.poll.samples import history_sample
from sidecar.sources.host import HostPaths
from sidecar.sources.lineage import RootInfo
from sidecar.sources.nvml.snapshot import GpuInfo
from sidecar.verdict import (
    Facts,
    GpuFacts,
    LoaderSettings,
    MathSettings,
    ModelFacts,
    ProcessFacts,
    ProcGpu,
    Rules,
    StepBreakdown,
    decide,
)
from tests.helpers.scripted_poll import ROOT, ScriptedJob, ScriptedSources

BOOT = "0f4b5c6d-1111-4222-8333-444455556666"
T0 = 1_800_000_000.0  # a minute's start
PID, TICKS = 4242, 777


class MemorySink:
    """A ledger that keeps what it is given: the batches, and each minute's last version (the
    ledger upserts minutes by run and start). ``failing``: every write fails (a full disk)."""

    def __init__(self, details: dict[str, RunDetail] | None = None) -> None:
        self.batches: list[LedgerBatch] = []
        self.fault: str | None = None
        self.failing = False
        self.details = details or {}
        self.maintained: list[float] = []
        self.forgotten: list[str] = []

    def write(self, batch: LedgerBatch) -> None:
        if self.failing:
            self.fault = "database or disk is full"
            return
        self.fault = None
        self.batches.append(batch)

    def detail(self, key: str) -> RunDetail | None:
        return self.details.get(key)

    def maintain(self, now_unix_s: float) -> None:
        self.maintained.append(now_unix_s)

    def forget(self, key: str) -> None:
        self.forgotten.append(key)

    # what was recorded, as the ledger would hold it
    def minutes(self) -> dict[float, MinuteFigures]:
        return {m.start_unix_s: m for b in self.batches for _, m in b.minutes}

    def record(self) -> RunRecord:
        return self.batches[-1].runs[-1]

    def changes(self) -> list[VerdictChange]:
        return [c for b in self.batches for _, c in b.changes]


@pytest.fixture
def procfs(tmp_path):
    """A /proc with a boot id (and nothing of any process: no Slurm job found)."""
    root = tmp_path / "proc"
    (root / "sys/kernel/random").mkdir(parents=True)
    (root / "sys/kernel/random/boot_id").write_text(BOOT + "\n")
    return HostPaths(procfs=str(root))


def _target() -> TargetInfo:
    return TargetInfo(
        pid=PID, name="python", cmdline=["python", "train.py", "--lr", "0.1"], create_time=T0 - 100, start_ticks=TICKS,
        root=RootInfo(uid=1000, user="ada", cwd="/home/ada/run", ancestor_pids=(1,)),
    )


def _facts(*, util=50.0, mem=2000.0, steps=100, rate=20.0, power=200.0, temp=50.0, alive=True, device="cuda:0"):
    """One poll of a job of one process training on GPU 0 (H100)."""
    model = ModelFacts("net", device, forward_calls=10, train_steps=steps, step_rate_hz=rate,
                       param_dtypes=("bfloat16",))
    proc = ProcessFacts(pid=PID, is_target=True, probe_state="ok", models=(model,),
                        runtime=RuntimeRecord(torch="2.5.1", cuda_build="12.4", cuda_available=True, device_count=1),
                        gpu=(ProcGpu(0, mem, 40.0),))
    gpu = GpuFacts(0, uuid="GPU-0", name="NVIDIA H100 80GB HBM3", util=util, mem_used_mib=mem + 500, mem_total_mib=81559.0,
                   power_w=power, temperature_c=temp, sm_clock_mhz=1980, sm_clock_max_mhz=1980)
    return Facts(target_pid=PID, target_alive=alive, processes=(proc,), nvml_ok=True, driver="550.54.15",
                 cuda_driver="12.4", gpus=(gpu,), target_age_s=100.0)


def _observe(rec, now, facts, energy_mj=None):
    sample = history_sample(now, facts)
    devices = () if energy_mj is None else (GpuInfo(0, energy_mj=energy_mj),)
    rec.observe(now, facts, decide(facts), _target(), None, sample, {}, devices)


def test_a_minute_is_its_polls_means_peaks_steps_and_gpu_seconds(procfs):
    sink = MemorySink()
    rec = Recording(sink, host=procfs).recorder(interval_s=1.5)
    polls = [  # (time, util, mem, steps, power, temperature, energy mJ)
        (T0 + 1.0, 10.0, 1000.0, 100, 100.0, 40.0, 1_000),
        (T0 + 2.5, 3.0, 3000.0, 130, 300.0, 60.0, 3_000),  # 3 % <= idle_util_pct: held, not busy
        (T0 + 4.0, 50.0, 2000.0, 160, 200.0, 50.0, 6_000),
    ]
    for t, util, mem, steps, power, temp, mj in polls:
        _observe(rec, t, _facts(util=util, mem=mem, steps=steps, power=power, temp=temp), mj)
    _observe(rec, T0 + 61.0, _facts(steps=170), 7_000)  # the next minute: the first one is final

    m = sink.minutes()[T0]
    assert m.polls == 3 and m.minutes == 1 and m.span_s == 60.0
    assert m.gpu_util_pct == pytest.approx((10 + 3 + 50) / 3)
    assert m.gpu_mem_used_mib == pytest.approx(2000.0) and m.gpu_mem_peak_mib == 3000.0
    assert m.power_w == pytest.approx(200.0) and m.power_peak_w == 300.0
    assert m.temperature_c == pytest.approx(50.0) and m.temperature_peak_c == 60.0
    assert m.steps == 60  # 130 - 100 + 160 - 130: the count before the first poll is not the minute's
    assert m.step_rate_hz == pytest.approx(20.0) and m.step_rate_sq_hz2 == pytest.approx(400.0)
    assert m.gpu_held_s == pytest.approx(1.5 + 1.5)  # the time since the job's last poll, one GPU
    assert m.gpu_busy_s == pytest.approx(1.5)  # the second poll's GPU was idle
    assert m.energy_j == pytest.approx((6_000 - 1_000) / 1000)
    assert m.sm_clock_mhz == 1980 and m.sm_clock_max_mhz == 1980 and m.gpu_processes == 1

    nxt = sink.minutes()[T0 + 60]
    assert nxt.polls == 1 and nxt.steps == 10
    # a poll 57 s after the last one holds at most 3 intervals (a sidecar suspended holds nothing)
    assert nxt.gpu_held_s == pytest.approx(3 * 1.5) and nxt.energy_j == pytest.approx(1.0)
    totals = sink.record().totals
    assert totals.steps == 70 and totals.gpu_held_s == pytest.approx(3.0 + 4.5)
    assert totals.gpu_busy_s == pytest.approx(1.5 + 4.5) and totals.energy_j == pytest.approx(6.0)
    assert totals.gpu_mem_peak_mib == 3000.0 and totals.power_peak_w == 300.0 and totals.temperature_peak_c == 60.0
    assert totals.wall_s == pytest.approx(T0 + 61.0 - (T0 - 100))


def test_a_shorter_period_makes_rows_of_that_span(procfs):
    """Recording(period_s=2) (the hidden --runs-period of tests): rows start at multiples of 2 s and
    say so (span_s), and a poll's GPU-seconds are its time since the last poll whatever the span."""
    sink = MemorySink()
    rec = Recording(sink, host=procfs, period_s=2.0).recorder(interval_s=0.5)
    for i, t in enumerate((T0 + 0.25, T0 + 0.75, T0 + 1.25, T0 + 1.75, T0 + 2.25, T0 + 4.25)):
        _observe(rec, t, _facts(steps=100 + 10 * i))
    rows = sink.minutes()
    assert sorted(rows) == [T0, T0 + 2, T0 + 4]
    assert all(m.span_s == 2.0 and m.minutes == 1 for m in rows.values())
    assert [rows[t].polls for t in sorted(rows)] == [4, 1, 1]
    assert [rows[t].steps for t in sorted(rows)] == [30, 10, 10]
    assert rows[T0].gpu_held_s == pytest.approx(1.5) and rows[T0 + 2].gpu_held_s == pytest.approx(0.5)
    assert rows[T0 + 4].gpu_held_s == pytest.approx(1.5)  # 2 s since the last poll, at most 3 intervals
    with pytest.raises(ValueError, match="whole number of them to the hour"):
        Recording(sink, host=procfs, period_s=7.0)


def test_a_plain_loop_s_step_rate_is_its_step_breakdown_s(procfs):
    """No framework callback counts a plain loop's steps (its models have no step rate): the row's
    step rate is the step breakdown's (steps per second: 1 / step_s, summed over the processes as
    the models' rates are), and the models' where they have one. A share the breakdown does not
    have (no loader= given: no data wait) is not known, and the poll is recorded all the same."""
    sink = MemorySink()
    rec = Recording(sink, host=procfs).recorder(interval_s=1.5)
    plain = _facts(steps=None, rate=None)
    breakdown = StepBreakdown(window_s=10.0, steps=200, step_s=0.05, forward_fraction=0.3)
    plain_procs = tuple(dataclasses.replace(p, steps=breakdown) for p in plain.processes)
    _observe(rec, T0 + 1.0, dataclasses.replace(plain, processes=plain_procs))
    framework = _facts(rate=4.0)
    framework_procs = tuple(dataclasses.replace(p, steps=breakdown) for p in framework.processes)
    _observe(rec, T0 + 2.5, dataclasses.replace(framework, processes=framework_procs))
    _observe(rec, T0 + 61.0, _facts(steps=None, rate=None))  # neither: no rate, not 0
    m = sink.minutes()[T0]
    assert m.polls == 2 and m.step_rate_hz == pytest.approx((20.0 + 4.0) / 2)
    assert m.forward_fraction == pytest.approx(0.3) and m.data_wait_fraction is None
    assert sink.minutes()[T0 + 60].step_rate_hz is None


def test_identity_and_setup(procfs):
    sink = MemorySink()
    rec = Recording(sink, host=procfs).recorder()
    _observe(rec, T0 + 1, _facts())
    r = sink.record()
    ident = r.identity
    assert ident.key == run_key(BOOT, f"{PID}-{TICKS}") and ident.job_id == f"{PID}-{TICKS}"
    assert (ident.uid, ident.user, ident.cwd) == (1000, "ada", "/home/ada/run")
    assert ident.command == ("python", "train.py", "--lr", "0.1") and ident.started_unix_s == T0 - 100
    assert ident.slurm_job is None and ident.pod is None
    s = r.setup
    assert (s.torch_version, s.torch_cuda, s.driver_version) == ("2.5.1", "12.4", "550.54.15")
    assert s.gpu_models == ("NVIDIA H100 80GB HBM3",) and s.precision == "bfloat16" and s.processes == 1
    assert r.state == "live" and r.last_seen_unix_s == T0 + 1


def test_first_poll_rules(procfs):
    """Nothing is written before a poll; the first poll's minute has one poll and no GPU-seconds
    (no time since a previous poll); a minute whose polls had no step figures has None, not 0."""
    sink = MemorySink()
    rec = Recording(sink, host=procfs).recorder(interval_s=1.5)
    rec.begin(T0, _target())
    assert sink.batches == []
    _observe(rec, T0 + 1, _facts(steps=None, rate=None))
    (m,) = sink.minutes().values()
    assert m.polls == 1 and m.gpu_held_s == 0.0 and m.steps is None and m.step_rate_hz is None
    assert m.energy_j is None  # no counter: not known, never 0
    assert sink.record().totals.steps is None


def test_verdict_changes_are_recorded_only_when_they_change(procfs):
    sink = MemorySink()
    rec = Recording(sink, host=procfs).recorder()
    on_gpu, on_cpu = _facts(), _facts(device="cpu")
    times = [T0 + i for i in range(1, 9)]
    for t, facts in zip(times, [on_gpu, on_gpu, _facts(), on_cpu, on_cpu, _facts(device="cpu"), on_gpu, on_gpu]):
        _observe(rec, t, facts)
    gpu_v, cpu_v = decide(on_gpu), decide(on_cpu)
    want = [
        (times[0], gpu_v.status, tuple(sorted({w.code for w in gpu_v.warnings}))),
        (times[3], cpu_v.status, tuple(sorted({w.code for w in cpu_v.warnings}))),
        (times[6], gpu_v.status, tuple(sorted({w.code for w in gpu_v.warnings}))),
    ]
    assert want[0][1:] != want[1][1:]  # the facts give two verdicts
    assert [(c.time_unix_s, c.status, c.warnings) for c in sink.changes()] == want
    assert (sink.record().status, sink.record().warnings) == want[-1][1:]


def test_writes_follow_the_cadence_and_hold_the_grown_minute(procfs):
    sink = MemorySink()
    rec = Recording(sink, host=procfs).recorder(interval_s=1.5)
    facts = _facts()
    times = [T0 + 1.5 * i for i in range(30)]  # 43.5 s of one minute, one verdict
    for t in times:
        _observe(rec, t, facts)
    written = [b.minutes[-1][1].polls for b in sink.batches]
    # the first poll, then every WRITE_EVERY_S (as polls fall)
    assert len(written) == 1 + math.floor((times[-1] - times[0]) / WRITE_EVERY_S)
    assert written == sorted(written) and written[0] == 1
    assert all(len(b.changes) == 0 for b in sink.batches[1:])


def test_a_stopping_poller_writes_its_run_s_last_polls(procfs):
    job = ScriptedJob(seed=8)
    sink = MemorySink()
    poller = _poller(job, Recording(sink, host=procfs))
    for _ in range(3):
        poller.poll_once()
        job.step()
    assert len(sink.batches) == 1 and sink.batches[0].minutes[-1][1].polls == 1  # written at first sight only
    poller.stop()
    assert len(sink.batches) == 2 and sum(m.polls for m in sink.minutes().values()) == 3
    assert sink.record().last_seen_unix_s == poller.last_poll_time
    poller.stop()  # again: nothing new to write
    assert len(sink.batches) == 2


def test_a_forgotten_run_is_deleted_and_writes_nothing_more(procfs):
    """Discovery's absorbed job: its run is deleted, the batch waiting for the poll's one write is
    dropped, and neither its polls nor its stop write anything after."""
    job = ScriptedJob(seed=9)
    sink = MemorySink()
    recording = Recording(sink, host=procfs, batched=True)
    poller = _poller(job, recording)
    poller.poll_once()  # first sight: a batch waits for the poll's flush
    assert len(recording._queue) == 1 and not sink.batches
    key = poller.recorder.identity.key
    poller.forget_run()
    assert sink.forgotten == [key] and not recording._queue
    poller.poll_once()
    poller.stop()
    recording.flush(T0)
    assert not sink.batches and not recording._queue


def test_run_s_exit_code_reaches_the_record_between_polls(procfs):
    job = ScriptedJob(seed=7)
    sink = MemorySink()
    poller = _poller(job, Recording(sink, host=procfs))
    poller.poll_once()
    poller.record_exit_code(137)
    assert sink.record().exit_code == 137 and sink.record().ended_unix_s == job.now()
    _poller(job, None).record_exit_code(1)  # no recorder: nothing to do


def test_the_end_and_the_exit_code(procfs):
    sink = MemorySink()
    rec = Recording(sink, host=procfs).recorder()
    _observe(rec, T0 + 1, _facts())
    _observe(rec, T0 + 2, _facts(alive=False))
    r = sink.record()
    assert r.ended_unix_s == T0 + 2 and r.state == "exited" and r.exit_code is None
    count = len(sink.batches)
    _observe(rec, T0 + 3, _facts(alive=False))  # polls after the end record nothing
    assert len(sink.batches) == count
    rec.set_exit_code(3, T0 + 4)
    assert sink.record().exit_code == 3 and sink.record().ended_unix_s == T0 + 2


def test_a_failing_ledger_keeps_what_it_did_not_take_and_sends_it_again(procfs):
    sink = MemorySink()
    rec = Recording(sink, host=procfs).recorder()
    _observe(rec, T0 + 1, _facts())
    sink.failing = True
    _observe(rec, T0 + 2, _facts(device="cpu"))  # a change: due, and refused
    _observe(rec, T0 + 61, _facts(device="cpu"))  # a minute's end: due, and refused
    assert rec.recording.fault == "database or disk is full"
    sink.failing = False
    _observe(rec, T0 + 75, _facts(device="cpu"))
    assert [c.time_unix_s for c in sink.changes()] == [T0 + 1, T0 + 2]
    assert sink.minutes()[T0].polls == 2 and sink.minutes()[T0 + 60].polls == 2


def _earlier(key: str) -> RunDetail:
    """What a ledger holds of a run its first sidecar recorded until T0 + 130 (then stopped)."""
    ident = RunIdentity(key=key, job_id=f"{PID}-{TICKS}", host="node1", started_unix_s=T0 - 100, uid=1000)
    minutes = (
        MinuteFigures(T0, polls=40, steps=600, step_rate_hz=10.0, gpu_util_pct=80.0, gpu_mem_used_mib=4000.0,
                      power_w=300.0, temperature_c=60.0, cpu_pct=100.0, rss_mib=2048.0, gpu_held_s=60.0, gpu_busy_s=50.0),
        MinuteFigures(T0 + 60, polls=40, steps=660, step_rate_hz=11.0, gpu_util_pct=90.0, gpu_mem_used_mib=4200.0,
                      power_w=320.0, temperature_c=62.0, gpu_held_s=60.0, gpu_busy_s=60.0),
        MinuteFigures(T0 + 120, polls=6, steps=60, step_rate_hz=10.0, gpu_util_pct=60.0, gpu_held_s=9.0, gpu_busy_s=9.0),
    )
    totals = RunTotals(wall_s=230.0, steps=1320, gpu_held_s=129.0, gpu_busy_s=119.0, gpu_mem_peak_mib=4500.0)
    record = RunRecord(ident, totals=totals, last_seen_unix_s=T0 + 130, status="GPU", warnings=())
    return RunDetail(record, (VerdictChange(T0 - 90, "GPU", ()),), minutes)


def test_a_restarted_sidecar_continues_the_run(procfs):
    key = run_key(BOOT, f"{PID}-{TICKS}")
    sink = MemorySink({key: _earlier(key)})
    rec = Recording(sink, host=procfs).recorder(interval_s=1.5)
    prefill = rec.begin(T0 + 140, _target())
    # The current minute is continued, and its recorded part shown too.
    assert [m.start_unix_s for m in prefill] == [T0, T0 + 60, T0 + 120]
    facts = _facts(steps=5000, util=40.0)
    _observe(rec, T0 + 140, facts)
    _observe(rec, T0 + 141.5, _facts(steps=5015, util=40.0))
    _observe(rec, T0 + 150.5, _facts(steps=5030, util=40.0))  # WRITE_EVERY_S after the first: written
    m = sink.minutes()[T0 + 120]
    assert m.polls == 6 + 3 and m.steps == 60 + 30
    assert m.gpu_util_pct == pytest.approx((60.0 * 6 + 40.0 * 3) / 9)
    assert m.gpu_held_s == pytest.approx(9.0 + 1.5 + 3 * 1.5)
    r = sink.record()
    assert r.totals.steps == 1320 + 30 and r.totals.gpu_held_s == pytest.approx(129.0 + 1.5 + 4.5)
    assert r.totals.gpu_mem_peak_mib == 4500.0 and r.identity.host == "node1"  # as first recorded
    assert sink.changes() == []  # the same verdict as recorded last: no change


def _poller(job: ScriptedJob, recording: Recording | None, history_s: float = 600.0) -> Poller:
    sources = ScriptedSources(job)
    return Poller(
        ROOT, interval_s=0.25, history_s=history_s, tree_source=sources.tree_source,
        segment_source=sources.segment_source, nvml_source=sources.nvml_source, system_gpus_fn=list,
        clock=job.now, recorder=None if recording is None else recording.recorder(interval_s=0.25),
    )


def test_a_poller_records_its_job(procfs):
    job = ScriptedJob(seed=3)
    sink = MemorySink()
    poller = _poller(job, Recording(sink, host=procfs))
    most = 0
    for i in range(12):
        if i == 11:
            job.t += 60  # the next minute: a write is due
        poller.poll_once()
        most = max(most, sum(1 for p in poller._last_facts.processes if not p.exited))
        job.step()
    r = sink.record()
    assert r.identity.key == run_key(BOOT, poller._collector.target.job_id)
    assert r.setup.gpu_models == ("NVIDIA H100 80GB HBM3",) * 4 and r.setup.processes == most
    assert r.totals.gpu_held_s > 0  # the ranks hold memory on their GPUs
    assert r.last_seen_unix_s == poller.last_poll_time
    assert sum(m.polls for m in sink.minutes().values()) == 12


def test_a_restarted_poller_shows_the_recorded_minutes_in_its_history(procfs, monkeypatch):
    monkeypatch.setenv("DSH_CONTRACT_CHECK", "1")
    job = ScriptedJob(seed=4)
    job.t = T0 + 140
    first = ScriptedSources(job).tree_source.poll()
    key = run_key(BOOT, f"{ROOT}-{first.processes[0].start_ticks}")
    sink = MemorySink({key: _earlier(key)})
    poller = _poller(job, Recording(sink, host=procfs))
    poller.poll_once()
    job.step()
    poller.poll_once()
    samples = poller.history.samples()
    recorded = [s for s in samples if s.recorded]
    # Each minute at its middle; the current one (recorded up to T0 + 140) at the middle of its past.
    assert [s.time for s in recorded] == [T0 + 30, T0 + 90, T0 + 130] and not any(s.recorded for s in samples[3:])
    doc = history_document(poller.history, None, poller.interval_s, key)
    contract.check(doc, "history")
    first_point = doc["samples"][0]
    assert first_point["recorded"] is True and first_point["step_rate_hz"] == 10.0 and first_point["cpu_pct"] == 100
    gpus = {g["index"] for g in first_point["gpus"]}
    assert gpus and all(g["util_pct"] == 80 for g in first_point["gpus"])
    assert sum(g["mem_used_mib"] for g in first_point["gpus"]) == pytest.approx(4000.0)
    assert doc["samples"][-1]["recorded"] is False
    # recorded minutes older than the history's span are not shown
    short = _poller(ScriptedJob(seed=4), Recording(MemorySink({key: _earlier(key)}), host=procfs), history_s=60.0)
    short.clock = lambda: T0 + 140
    short.poll_once()
    assert [s.time for s in short.history.samples() if s.recorded] == [T0 + 90, T0 + 130]


def test_a_ledger_fault_is_a_warning_on_the_status_document(procfs):
    job = ScriptedJob(seed=5)
    sink = MemorySink()
    poller = _poller(job, Recording(sink, host=procfs))
    poller.poll_once()
    assert "runs-not-recorded" not in [w["code"] for w in poller.snapshot()[0]["warnings"]]
    sink.failing = True
    job.step()
    job.t += 60  # a minute's end: a write is due
    poller.poll_once()
    warnings = {w["code"]: w for w in poller.snapshot()[0]["warnings"]}
    assert warnings["runs-not-recorded"]["severity"] == "info"
    assert "database or disk is full" in warnings["runs-not-recorded"]["message"]
    sink.failing = False
    job.step()
    job.t += 60
    poller.poll_once()
    assert "runs-not-recorded" not in [w["code"] for w in poller.snapshot()[0]["warnings"]]
    assert all("runs-not-recorded" not in c.warnings for c in sink.changes())


def test_a_poller_without_a_recorder_records_nothing_and_publishes_alike(procfs):
    """The same script through a recording poller and one without: the same documents (but for
    nothing), so recording changes nothing a poller publishes."""
    a, b = ScriptedJob(seed=6), ScriptedJob(seed=6)
    plain, recording = _poller(a, None), _poller(b, Recording(MemorySink(), host=procfs))
    for _ in range(10):
        assert plain.poll_once() == recording.poll_once()
        a.step()
        b.step()
    assert plain.recorder is None
    assert [s.as_dict() for s in plain.history.samples()] == [s.as_dict() for s in recording.history.samples()]


def test_maintenance_runs_a_minute_after_the_first_write_then_hourly(procfs):
    sink = MemorySink()
    rec = Recording(sink, host=procfs).recorder()
    times = (T0 + 1, T0 + 15, T0 + 61, T0 + 75, T0 + 3000, T0 + 3661, T0 + 3675)
    for t in times:
        _observe(rec, t, _facts())
    assert sink.maintained == [T0 + 61, T0 + 3661]


def test_a_figure_a_minute_misses_is_none_in_the_record_not_zero(procfs):
    """Fields of MinuteFigures no poll had (GPM on an H100 without it here) stay None."""
    sink = MemorySink()
    rec = Recording(sink, host=procfs).recorder()
    _observe(rec, T0 + 1, _facts())
    m = sink.minutes()[T0]
    for name in ("sm_activity_fraction", "tensor_activity_fraction", "data_wait_fraction", "syncs_per_step",
                 "cpu_pct", "rss_mib"):
        assert getattr(m, name) is None, name
    assert dataclasses.replace(m) == m


def test_discovery_writes_every_job_s_batch_of_a_poll_in_one(procfs):
    """A batched Recording (discovery's) writes nothing until flushed, then the poll's batches of
    all its jobs as one; each JobsPoller job's poller records through it."""
    from sidecar.poll.discovery import JobsPoller

    sink = MemorySink()
    recording = Recording(sink, host=procfs, batched=True)
    a, b = recording.recorder(), recording.recorder()
    _observe(a, T0 + 1, _facts())
    other = dataclasses.replace(_target(), pid=PID + 1)
    b.observe(T0 + 1, _facts(), decide(_facts()), other, None, history_sample(T0 + 1, _facts()), {}, ())
    assert sink.batches == []
    recording.flush(T0 + 1)
    (batch,) = sink.batches
    assert sorted(r.identity.job_id for r in batch.runs) == [f"{PID}-{TICKS}", f"{PID + 1}-{TICKS}"]
    assert len(batch.minutes) == 2
    recording.flush(T0 + 2)  # nothing due: nothing written
    assert len(sink.batches) == 1
    jobs = JobsPoller(nvml_source=object(), system_gpus_fn=list, recording=recording)
    plain = JobsPoller(nvml_source=object(), system_gpus_fn=list)
    made = [jobs._new_poller(PID), plain._new_poller(PID)]
    try:
        recorded, unrecorded = made
        assert recorded.recorder is not None and recorded.recorder.recording is recording
        assert recorded.recorder.interval_s == jobs.interval_s and unrecorded.recorder is None
    finally:
        for p in (*made, jobs, plain):
            p.stop()


@pytest.mark.parametrize(
    ("dtypes", "autocast", "math", "want"),
    [
        (("float32",), None, None, "float32"),
        (("float32",), "off", MathSettings(allow_tf32_matmul=True), "tf32"),
        (("float32",), None, MathSettings(float32_matmul_precision="high"), "tf32"),
        (("float32",), None, MathSettings(float32_matmul_precision="highest"), "float32"),
        (("float32",), "bfloat16", MathSettings(allow_tf32_matmul=True), "autocast bfloat16"),
        (("bfloat16", "float32"), None, None, "bfloat16+float32"),
        ((), None, None, None),
    ],
)
def test_the_setup_s_precision(dtypes, autocast, math, want):
    f = _facts()
    (proc,) = f.processes
    model = dataclasses.replace(proc.models[0], param_dtypes=dtypes, autocast=autocast)
    f = dataclasses.replace(f, processes=(dataclasses.replace(proc, models=(model,), math=math),))
    assert run_setup(f, RunSetup()).precision == want


def test_the_setup_keeps_the_latest_known_of_each():
    f = _facts()
    (proc,) = f.processes
    loader = LoaderSettings(num_workers=4, pin_memory=True, batch_size=64)
    model = dataclasses.replace(proc.models[0], loader_settings=loader)
    first = run_setup(dataclasses.replace(f, processes=(dataclasses.replace(proc, models=(model,)),)), RunSetup())
    assert first.loader == (("num_workers", "4"), ("batch_size", "64"), ("pin_memory", "True"))
    # a later poll without a probe (its payload not read) and NVML down keeps what was known
    bare = dataclasses.replace(f, processes=(ProcessFacts(pid=PID),), gpus=(), driver=None)
    again = run_setup(bare, first)
    assert again is first
    assert run_setup(bare, first, most_processes=3).processes == 3


def test_a_run_kept_in_the_real_ledger_is_continued_by_the_next_sidecar(procfs, tmp_path):
    """Through sources/ledger's Ledger (SQLite on tmp_path): a sidecar records three minutes of a
    job and stops; the next one, under the same job, continues its totals and shows those minutes."""
    from sidecar.sources.ledger import Ledger

    db = tmp_path / "runs" / "runs.sqlite3"
    job = ScriptedJob(seed=9)
    job.t = T0
    with Ledger(db) as ledger:
        first = _poller(job, Recording(ledger, host=procfs))
        for _ in range(3 * 60 * 4):  # three minutes at 0.25 s
            first.poll_once()
            job.step()
        first.stop()
        key = run_key(BOOT, first._collector.target.job_id)
        kept = ledger.detail(key)
    assert kept is not None and [m.start_unix_s for m in kept.minutes] == [T0, T0 + 60, T0 + 120]
    assert sum(m.polls for m in kept.minutes) == 3 * 60 * 4
    held = kept.record.totals.gpu_held_s
    assert held == pytest.approx(sum(m.gpu_held_s for m in kept.minutes)) and held > 0

    job.t += 30  # the sidecar restarts half a minute later, the job still running
    with Ledger(db) as ledger:
        second = _poller(job, Recording(ledger, host=procfs))
        for _ in range(8):
            second.poll_once()
            job.step()
        second.stop()
        again = ledger.detail(key)
    assert [s.time for s in second.history.samples() if s.recorded] == [T0 + 30, T0 + 90, T0 + 150]
    assert again is not None and again.record.totals.gpu_held_s > held
    assert sum(m.polls for m in again.minutes) == 3 * 60 * 4 + 8
    assert again.record.identity == kept.record.identity


@pytest.mark.parametrize(
    ("util", "sm_activity", "busy"),
    [(5.0, None, True), (4.9, None, False), (None, 0.5, True), (None, 0.01, False), (None, None, False)],
)
def test_a_held_gpu_is_busy_as_the_accounting_counts_it(util, sm_activity, busy):
    """At or above Rules.idle_util_pct, else GPM's SM activity; neither known (MIG): held, not
    busy (verdict.accounting.gpu_works, which /metrics and `report` count by too)."""
    from sidecar.poll.run_figures import GpuPart

    f = _facts()
    (g,) = f.gpus
    f = dataclasses.replace(f, gpus=(dataclasses.replace(g, util=util, sm_activity_fraction=sm_activity),))
    part = GpuPart(f, {}, Rules().idle_util_pct)
    assert (part.held, part.busy) == (1, int(busy))
