"""Acting as another local user (real uids, as root): reading a sidecar from that user's own
socket, and publishing a probe segment as that user.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from hostfs.procid import process_start_ticks
from probe_wire import SegmentWriter
from tests.helpers.stress_jobs import variant

NOBODY = 65534
STRANGER = 65533  # a third user, with no job and no sidecar of its own
CLIENT = textwrap.dedent(
    """
    import json, sys, urllib.error, urllib.request
    req = urllib.request.Request(sys.argv[1])
    if len(sys.argv) > 2:
        req.add_header("Authorization", "Bearer " + sys.argv[2])
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            code, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        code, body = e.code, e.read()
    try:
        body = json.loads(body)
    except ValueError:
        body = body.decode("utf-8", "replace")[:200]
    print(json.dumps([code, body]))
    """
)


def get_as(uid: int, url: str, token: str | None = None) -> tuple[int, object]:
    """GET `url` from a process of user `uid` (its own socket, as that user's curl would be)."""
    r = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-c", CLIENT, url]
        + ([token] if token else []),
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert r.returncode == 0, r.stderr
    code, body = json.loads(r.stdout)
    return code, body


FORGER = NOBODY - 1  # a second unprivileged uid: the neighbour who forges


def write_as(uid: int, pid: int, payload_k: int = 0) -> None:
    """Publish a valid segment for `pid` from a forked child running as `uid` (a real second user:
    the file is created by that uid, as an attacker's would be). The child leaves the file behind."""
    ticks = process_start_ticks(pid)
    child = os.fork()
    if child == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            w = SegmentWriter(pid=pid, start_ticks=ticks)
            w.publish(variant(pid, ticks, payload_k))
            w.detach()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
