"""A probed process in a container: its own mount namespace with a private /dev/shm (as a pod's)
and its own PID namespace. The sidecar outside reads its segment through /proc/<pid>/root/dev/shm,
naming the writer by its pid in its own namespace (NSpid), with the owner checks kept. Real
namespaces (`unshare -m -p -f --mount-proc` as root), a real writer, the sidecar's own segment
source and CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from hostfs.procroot import open_in_root
from probe_wire import read_segment
from probe_wire.home import segment_home
from sidecar.sources.proctree import ProcessTreeSource
from sidecar.sources.segments import SegmentSource
from tests.helpers.harness import REPO, python_env, wait_for

needs_unshare = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)"
)

WRITER = """
import sys
from probe_wire import SegmentWriter, empty_payload
w = SegmentWriter()
p = empty_payload(start_ticks=w.start_ticks)
p["models"] = [dict(name="in-a-pod", **{k: v for k, v in MODEL.items()})]
w.publish(p)
print(w.name, flush=True)
sys.stdin.readline()
w.close()
"""
MODEL = {
    "class": "Net", "params": 10, "device": "cpu", "devices": ["cpu"], "input_device": None,
    "forward_calls": 3, "forward_rate_hz": 0.0, "last_forward_time": None,
    "data_wait_fraction": None, "data_wait_s": None, "step_s": None,
}


@pytest.fixture
def contained_writer():
    """(the writer's pid here, the launcher's pid): pid 1 of its own PID namespace, its segment in
    a tmpfs /dev/shm of its own mount namespace, which ours does not see."""
    code = f"MODEL = {MODEL!r}\n{WRITER}"
    proc = subprocess.Popen(
        [
            "unshare", "-m", "-p", "-f", "--mount-proc", "bash", "-c",
            'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"', "bash", sys.executable, "-c", code,
        ],
        env=python_env(),
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "/dsh-probe.1"
        kids = wait_for(lambda: _children(proc.pid), what="the contained writer's pid")
        yield kids[0], proc.pid
    finally:
        proc.communicate("\n", timeout=60)


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(x) for x in f.read().split()]


@needs_unshare
def test_the_segment_of_a_contained_writer_is_read_through_its_root(contained_writer):
    pid, launcher = contained_writer
    assert not os.path.exists(f"/dev/shm/dsh-probe.{pid}") and not os.path.exists("/dev/shm/dsh-probe.1")
    home = segment_home(pid)
    assert home is not None and home.name_pid == 1 and home.root == f"/proc/{pid}/root"
    assert read_segment(pid).state == "missing"  # our /dev/shm holds nothing of it
    r = read_segment(pid, home=home)
    assert r.state == "ok", r
    assert r.writer_pid == 1 and r.payload["pid"] == 1 and r.payload["models"][0]["name"] == "in-a-pod"
    # The sidecar's own source, through its follower, finds the home by itself.
    tree = ProcessTreeSource(launcher).poll()
    src = SegmentSource()
    try:
        reads = src.poll(tree)
        assert reads[pid].state == "ok" and reads[pid].payload.models[0].name == "in-a-pod"
        assert src.poll(tree)[pid] is reads[pid]  # followed: the same read while it is unchanged
    finally:
        src.close()


@needs_unshare
def test_the_sidecar_cli_shows_the_contained_process_s_model(contained_writer):
    pid, launcher = contained_writer
    out = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "--pid", str(launcher), "--once", "--json"],
        env=python_env(), cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    doc = json.loads(out.stdout)
    entry = next(p for p in doc["processes"] if p["pid"] == pid)
    assert [m["name"] for m in entry["models"]] == ["in-a-pod"], entry


@needs_unshare
def test_the_owner_check_holds_inside_a_container(contained_writer):
    """A file under the writer's name owned by another uid than the process's is never believed,
    read through its root as everywhere else."""
    pid, _ = contained_writer
    home = segment_home(pid)
    path = f"/proc/{pid}/root/dev/shm/dsh-probe.1"
    os.chown(path, 4242, 4242)
    try:
        r = read_segment(pid, home=home)
        assert r.state == "owner-mismatch", r
    finally:
        os.chown(path, 0, 0)
    assert read_segment(pid, home=home).state == "ok"


def test_links_inside_a_root_resolve_inside_it(tmp_path):
    """A container's /dev/shm that is a link to an absolute path names the container's path, never
    the reader's; '..' never climbs out."""
    root = tmp_path / "root"
    (root / "run" / "shm").mkdir(parents=True)
    (root / "run" / "shm" / "f").write_text("inside")
    (root / "dev").mkdir()
    os.symlink("/run/shm", root / "dev" / "shm")
    fd = open_in_root(str(root), "dev/shm/f", os.O_RDONLY, follow_last=False)
    try:
        assert os.read(fd, 100) == b"inside"
    finally:
        os.close(fd)
    os.symlink("/etc/hostname", root / "dev" / "shm-f")  # the reader's /etc/hostname exists
    with pytest.raises(FileNotFoundError):
        os.close(open_in_root(str(root), "dev/shm-f", os.O_RDONLY, follow_last=True))
    os.symlink("../../../../etc", root / "dev" / "up")
    with pytest.raises(OSError):
        os.close(open_in_root(str(root), "dev/up/hostname", os.O_RDONLY, follow_last=True))
    with pytest.raises(OSError):  # the last component a link where none may be
        os.close(open_in_root(str(root), "dev/shm", os.O_RDONLY, follow_last=False))
