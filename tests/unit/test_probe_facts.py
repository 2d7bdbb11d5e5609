"""Identity, role and runtime facts of the test process itself (real torch, CPU build or not)."""

from __future__ import annotations

import os
import socket
import sys

import pytest

from hostfs.procid import process_start_ticks
from probe import facts
from probe_wire import SegmentWriter, empty_payload, segment_path

torch = pytest.importorskip("torch")


def test_identity_of_this_process():
    ident = facts.identity()
    assert ident["pid"] == os.getpid()
    assert ident["ppid"] == os.getppid()
    assert ident["start_ticks"] == process_start_ticks(os.getpid())
    assert ident["argv0"] == sys.argv[0]
    # pytest's __main__ has a file; an xdist worker's (execnet's bootstrap) has none: then no script.
    main_file = getattr(sys.modules["__main__"], "__file__", None)
    assert ident["script"] == (os.path.abspath(main_file) if main_file else None)
    assert ident["hostname"] == socket.gethostname()


@pytest.fixture
def no_rank_env(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def test_role_main_by_default(no_rank_env):
    if os.path.exists(segment_path(os.getppid())):
        pytest.skip("this test's parent process runs the probe")
    assert facts.role(forked=False) == {
        "role": "main",
        "worker_id": None,
        "rank": None,
        "local_rank": None,
        "world_size": None,
        "dist_backend": None,
    }


def test_role_rank_from_environment(no_rank_env, monkeypatch):
    if os.path.exists(segment_path(os.getppid())):
        pytest.skip("this test's parent process runs the probe")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert facts.role(forked=False) | {} == {
        "role": "rank",
        "worker_id": None,
        "rank": 3,
        "local_rank": 1,
        "world_size": 8,
        "dist_backend": None,
    }
    monkeypatch.setenv("RANK", "not-a-number")
    assert facts.role(forked=False)["rank"] is None


def test_role_child_when_forked_or_parent_runs_the_probe(no_rank_env):
    assert facts.role(forked=True)["role"] == "child"
    parent = os.getppid()
    if os.path.exists(segment_path(parent)):
        pytest.skip("this test's parent already has a segment")
    writer = SegmentWriter(pid=parent)
    try:
        writer.publish(empty_payload(pid=parent, start_ticks=writer.start_ticks))
        assert facts.role(forked=False)["role"] == "child"
    finally:
        writer.close()


SQUATTER_UID = 65533  # another user, who may create files in /dev/shm under any name
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make another uid's file")


def _plant_foreign_file(path: str) -> None:
    with open(path, "xb"):
        pass  # empty, as `touch` leaves it
    os.chown(path, SQUATTER_UID, SQUATTER_UID)


@pytest.fixture
def parent_names():
    """The test's parent's two segment names, free before the test and removed after it."""
    parent = os.getppid()
    paths = [segment_path(parent), segment_path(parent, process_start_ticks(parent))]
    if any(os.path.lexists(p) for p in paths):
        pytest.skip("this test's parent already has a segment")
    yield parent, paths
    for p in paths:
        if os.path.lexists(p):
            os.unlink(p)


@pytest.mark.parametrize("where", ["own name", "fallback name"])
@needs_root
def test_role_main_when_another_user_planted_a_file_under_the_parents_names(no_rank_env, parent_names, where):
    """An empty file of another uid named after the parent's pid (or its fallback name) is no probe
    of the parent's: the job's main process stays `main`."""
    _, (own, fallback) = parent_names
    _plant_foreign_file(own if where == "own name" else fallback)
    assert facts.role(forked=False)["role"] == "main"


@needs_root
def test_role_main_when_the_parents_name_holds_a_segment_of_another_user(no_rank_env, parent_names):
    """A whole segment naming the parent, but in a file of another uid: only the process writes its
    segment, so it is not the parent's."""
    parent, (own, _) = parent_names
    writer = SegmentWriter(pid=parent)
    try:
        writer.publish(empty_payload(pid=parent, start_ticks=writer.start_ticks))
        os.chown(own, SQUATTER_UID, SQUATTER_UID)
        assert facts.role(forked=False)["role"] == "main"
    finally:
        writer.close()


def test_role_main_when_the_parents_name_holds_a_dead_writers_leftover(no_rank_env, parent_names):
    """A segment left by a process that had the parent's pid before (another start_ticks)."""
    parent, _ = parent_names
    writer = SegmentWriter(pid=parent, start_ticks=process_start_ticks(parent) - 1)
    try:
        writer.publish(empty_payload(pid=parent, start_ticks=writer.start_ticks))
        assert facts.role(forked=False)["role"] == "main"
    finally:
        writer.close()


@needs_root
def test_role_child_when_the_parent_publishes_under_its_fallback_name(no_rank_env, parent_names):
    parent, (own, fallback) = parent_names
    _plant_foreign_file(own)
    writer = SegmentWriter(pid=parent)
    try:
        assert writer.name == "/" + os.path.basename(fallback), writer.fallback_reason
        writer.publish(empty_payload(pid=parent, start_ticks=writer.start_ticks))
        assert facts.role(forked=False)["role"] == "child"
    finally:
        writer.close()


def test_role_rank_from_initialised_torch_distributed(no_rank_env, tmp_path):
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this build")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        who = facts.role(forked=True)  # an initialised rank wins over "forked child"
        assert (who["role"], who["rank"], who["world_size"], who["dist_backend"]) == ("rank", 0, 1, "gloo")
    finally:
        dist.destroy_process_group()


def test_runtime_matches_torch_and_never_initialises_cuda():
    rt = facts.runtime(torch)
    assert rt["torch"] == torch.__version__
    assert rt["cuda_build"] == torch.version.cuda
    assert rt["cuda_initialized"] is torch.cuda.is_initialized()
    assert rt["cuda_visible_devices"] == os.environ.get("CUDA_VISIBLE_DEVICES")
    assert rt["cuda_device_order"] == os.environ.get("CUDA_DEVICE_ORDER")
    assert rt["mps_available"] in (True, False, None)
    if torch.version.cuda is None:
        assert (rt["cuda_available"], rt["device_count"], rt["devices"], rt["cudnn"]) == (False, 0, [], None)
        assert facts.memory(torch) == []
    assert torch.cuda.is_initialized() is False or rt["cuda_initialized"]


def test_runtime_asks_cudnn_only_once_cuda_runs(monkeypatch):
    """torch.backends.cudnn.version() initialises CUDA (torch 2.11, H200): a CUDA build of torch
    on a GPU machine, CUDA not yet initialised, must publish without asking it."""
    from types import SimpleNamespace

    state = {"initialised": False, "asked": 0}

    def version():
        state["asked"] += 1
        state["initialised"] = True  # what the real call does
        return 91900

    fake = SimpleNamespace(
        __version__="2.11.0+cu130",
        version=SimpleNamespace(cuda="13.0", hip=None),
        backends=SimpleNamespace(cudnn=SimpleNamespace(version=version)),
        cuda=SimpleNamespace(
            is_initialized=lambda: state["initialised"],
            _device_count_nvml=lambda: 1,
            device_count=lambda: 1,
            get_device_properties=lambda i: SimpleNamespace(name="NVIDIA H200", uuid="GPU-x"),
        ),
    )
    monkeypatch.setattr(facts, "_static_runtime", None)
    monkeypatch.setattr(facts, "_cudnn", [])
    monkeypatch.setattr(facts, "_cuda_probe_cache", {})
    monkeypatch.setattr(facts, "_initialised_devices", None)
    monkeypatch.setattr(facts, "driver_library", lambda: (True, (13, 0)))
    rt = facts.runtime(fake)
    assert state == {"initialised": False, "asked": 0} and rt["cudnn"] is None and rt["cuda_available"]
    state["initialised"] = True  # the user's code moved a model to the GPU
    assert facts.runtime(fake)["cudnn"] == 91900 and state["asked"] == 1


def test_runtime_without_torch_says_nothing_about_torch(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    rt = facts.runtime(None)
    assert rt["torch"] is None and rt["cuda_available"] is None
    assert rt["cuda_visible_devices"] == "1,0"
    assert facts.memory(None) == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_devices_and_memory_once_initialised():  # pragma: no cover - GPU machines only
    x = torch.ones(1024, device="cuda")
    rt = facts.runtime(torch)
    assert rt["cuda_initialized"] is True and rt["device_count"] == torch.cuda.device_count()
    assert rt["devices"][0]["name"] == torch.cuda.get_device_name(0)
    assert rt["devices"][0]["uuid"].startswith(("GPU-", "MIG-"))
    mem = facts.memory(torch)
    assert mem[0]["device"] == "cuda:0" and mem[0]["allocated_bytes"] >= x.numel() * 4
