"""Discovery lists /dev/shm again only when the directory changed (its mtime), and never trusts a
listing whose mtime was too young to be settled (the kernel stamps directories from a coarse clock:
two changes within one tick leave one mtime)."""

from __future__ import annotations

import os
import time

from sidecar.jobs import REDISCOVER_EVERY_POLLS, JobsPoller


def _poller(shm) -> tuple[JobsPoller, list[int]]:
    p = JobsPoller(shm_dir=str(shm), nvml_source=object(), system_gpus_fn=list)
    listings = []
    real = p._list_segment_pids

    def counted() -> set[int]:
        listings.append(1)
        return real()

    p._list_segment_pids = counted  # type: ignore[method-assign]
    p.poll_count = 1  # not a REDISCOVER poll
    return p, listings


def _age(path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_an_unchanged_directory_is_not_listed_again_and_a_new_name_is_found_at_once(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    mine = shm / f"dsh-probe.{os.getpid()}"
    mine.write_bytes(b"")
    _age(shm, 5)
    p, listings = _poller(shm)
    assert p._segment_pids() == {os.getpid()}
    assert p._segment_pids() == {os.getpid()} and len(listings) == 1  # reused
    mine.unlink()  # the directory changes: listed again, at once
    _age(shm, 5)
    assert p._segment_pids() == set() and len(listings) == 2
    p.poll_count = REDISCOVER_EVERY_POLLS  # and every REDISCOVER_EVERY_POLLS-th poll lists anyway
    p._segment_pids()
    assert len(listings) == 3


def test_a_listing_taken_while_the_mtime_was_young_is_not_reused(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    p, listings = _poller(shm)
    assert p._segment_pids() == set()  # the directory was made just now: its mtime may move no more
    # A name made within the same clock tick keeps the directory's mtime: planted here by hand.
    mtime_ns = os.stat(shm).st_mtime_ns
    (shm / f"dsh-probe.{os.getpid()}").write_bytes(b"")
    os.utime(shm, ns=(mtime_ns, mtime_ns))
    assert p._segment_pids() == {os.getpid()} and len(listings) == 2


def test_the_sweep_of_dead_writers_skips_the_segments_the_jobs_read_ok(tmp_path, monkeypatch):
    """Discovery's sweep of /dev/shm leaves out the pids whose segments a job read ok at the last
    poll (live writers): reading each of them again cost a poll milliseconds every 20 polls."""
    from types import SimpleNamespace

    import sidecar.jobs as jobs_module
    from sidecar.sources.segments import ProbeRead, SegmentSource

    shm = tmp_path / "shm"
    shm.mkdir()
    p, _ = _poller(shm)
    source = SegmentSource(sweep_foreign=False)
    source._last_ok[(4242, 7)] = ProbeRead(4242, "ok", {}, None, False)
    job = SimpleNamespace(poller=SimpleNamespace(segment_source=source, poll_once=lambda: None, target_gone_at=None))
    p._jobs = {"4242-7": job}  # type: ignore[dict-item]
    p._discover = lambda now, nvml: None  # type: ignore[method-assign]
    p._publish = lambda now: SimpleNamespace(jobs={})  # type: ignore[method-assign]
    swept = []
    monkeypatch.setattr(jobs_module, "sweep_dead_segments", lambda **kw: swept.append(kw))
    monkeypatch.setattr(jobs_module, "poll_nvml", lambda source, errors: SimpleNamespace(ok=False, devices=()))
    p.poll_count = 0  # a sweep poll
    p.poll_once()
    assert swept == [{"skip": {4242}, "shm_dir": str(shm)}]


def test_the_os_devices_are_matched_to_nvml_once_for_the_same_inputs():
    from sidecar.collect import system_gpu_facts
    from sidecar.sources.sysfs import SystemGpu
    from sidecar.verdict import GpuFacts

    gpus = (GpuFacts(0, "GPU-0", "A100", "00000000:10:00.0", 1.0, 1.0, 1.0, 2.0),)
    system = [SystemGpu("NVIDIA", "0x10de", "0x20b0", "NVIDIA GPU", "0000:10:00.0", "nvidia")]
    first = system_gpu_facts(system, gpus)
    assert first[0].nvml_index == 0 and system_gpu_facts(system, gpus) is first
    moved = [SystemGpu("NVIDIA", "0x10de", "0x20b0", "NVIDIA GPU", "0000:11:00.0", "nvidia")]  # another list: matched again
    assert system_gpu_facts(moved, gpus)[0].nvml_index is None

