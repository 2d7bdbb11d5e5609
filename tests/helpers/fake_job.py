"""A stand-in training process that publishes probe facts through the probe's own writer.

Real torch here is a CPU build, so a process that claims its model is on `cuda:0` is simulated: it
publishes a payload through `probe_wire.SegmentWriter` (the same bytes the probe writes), while
the simulated driver reports the same pid on a GPU.

    python -m tests.helpers.fake_job DIR NAME

reads DIR/NAME.json (re-read whenever it changes): {"payload": {...}, "children": [names],
"forward_rate_hz": 20, "probe": true}; starts each child the same way, publishes its first segment,
then writes its pid to DIR/NAME.pid (so a test that has the pid file has the segment too); publishes every 0.2 s with forward_calls advancing at forward_rate_hz. It exits on SIGTERM or
when DIR/NAME.json disappears.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time

import probe_wire as segment

MODEL_DEFAULTS = {
    "name": "model",
    "class": "Module",
    "params": 0,
    "device": "cpu",
    "devices": [],
    "input_device": None,
    "forward_calls": 0,
    "forward_rate_hz": 0.0,
    "last_forward_time": None,
    "data_wait_fraction": None,
    "data_wait_s": None,
    "step_s": None,
}


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = (
            _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
        )
    return out


def _write_pid_file(directory: str, name: str) -> None:
    # Written whole (rename) so a reader never sees a partial pid.
    with open(os.path.join(directory, f"{name}.pid.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(directory, f"{name}.pid.tmp"), os.path.join(directory, f"{name}.pid"))


def main() -> int:
    directory, name = sys.argv[1], sys.argv[2]
    spec_path = os.path.join(directory, f"{name}.json")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    kids: list[subprocess.Popen] = []
    announced = False
    writer = None
    spec_mtime = None
    spec: dict = {}
    calls = 0.0
    last = time.monotonic()
    started_children = False
    while not stop:
        try:
            st = os.stat(spec_path)
        except FileNotFoundError:
            break
        if st.st_mtime_ns != spec_mtime:
            spec_mtime = st.st_mtime_ns
            with open(spec_path) as f:
                spec = json.load(f)
        if not started_children:
            started_children = True
            for child in spec.get("children", ()):
                kids.append(
                    subprocess.Popen([sys.executable, "-m", "tests.helpers.fake_job", directory, child])
                )
        now = time.monotonic()
        calls += spec.get("forward_rate_hz", 20) * (now - last)
        last = now
        if spec.get("probe", True):
            if writer is None:
                writer = segment.SegmentWriter()
            payload = _merge(segment.empty_payload(os.getpid(), writer.start_ticks), spec.get("payload", {}))
            payload["ppid"] = os.getppid()
            for i, m in enumerate(payload["models"]):
                full = {
                    **MODEL_DEFAULTS,
                    "forward_calls": int(calls),
                    "forward_rate_hz": float(spec.get("forward_rate_hz", 20)),
                    "last_forward_time": time.time(),
                }
                full.update(m)
                payload["models"][i] = full
            payload["published_at"] = time.time()
            writer.publish(payload)
        if not announced:
            announced = True
            _write_pid_file(directory, name)
        time.sleep(0.2)
    for k in kids:
        k.terminate()
    for k in kids:
        k.wait()
    if writer is not None:
        writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
