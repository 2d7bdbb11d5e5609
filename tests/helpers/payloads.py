"""Probe payloads for the wire-format tests: a rich one as a rank of a real job publishes it, every
position in a payload, a payload changed at one position, JSON-like values drawn by hypothesis,
and a payload with every optional field set.
"""

from __future__ import annotations

from hypothesis import strategies as st

import probe_wire as segment
from tests.helpers.stress_jobs import _payload

json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)


def set_path(payload: dict, path: tuple, value) -> None:
    node = payload
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value


def mutated(payload: dict, path: tuple, value, drop: bool) -> dict:
    """``payload`` with the key at ``path`` removed (``drop``, where it is a map's) or set to ``value``."""
    if drop and isinstance(path[-1], str):
        node = payload
        for step in path[:-1]:
            node = node[step]
        del node[path[-1]]
    else:
        set_path(payload, path, value)
    return payload


def payload_paths(node, prefix=()):
    """Every (container, key) position in a payload, nested lists and maps included."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from payload_paths(value, (*prefix, key))


def rich_payload(pid: int) -> dict:
    p = _payload(pid, 1234, 1, "rank", 1, 2, 100)
    p["events"] = [{"time": 1.0, "name": "start"}]
    p["errors"] = [{"time": 2.0, "where": "hook", "message": "x"}]
    return p


RICH_PATHS = sorted(payload_paths(rich_payload(7)), key=repr)


def full_payload(pid: int, ticks: int) -> dict:
    """A schema-1 payload with every optional field set and every list holding one item, so every
    field of the schema has a value to replace."""
    p = segment.empty_payload(pid, ticks)
    p.update(
        ppid=1,
        argv0="python",
        script="train.py",
        hostname="node1",
        role="rank",
        worker_id=0,
        rank=0,
        local_rank=0,
        world_size=2,
        dist_backend="nccl",
        job_key="run-7",
        job_key_source="torchelastic",
        node_rank=0,
        restart_count=0,
        loader="train",
        runtime={
            "torch": "2.5.1",
            "cuda_build": "12.4",
            "cudnn": 90100,
            "cuda_available": True,
            "cuda_initialized": True,
            "device_count": 1,
            "devices": [
                {"index": 0, "name": "A100", "uuid": "GPU-1", "pci_bus_id": "0000:10:00.0", "gcn_arch": "gfx90a"}
            ],
            "cuda_visible_devices": "0",
            "cuda_device_order": "PCI_BUS_ID",
            "mps_available": False,
            "xpu_available": True,
            "cuda_driver_loadable": True,
            # every field has a value (the wrong-type test tries each against its own type)
            "hip_build": "6.2.41133",
            "xpu_build": "20250004",
            "hip_visible_devices": "0",
            "rocr_visible_devices": "0",
            "gpu_device_ordinal": "0",
            "ze_affinity_mask": "0",
            "xpu_initialized": True,
            "xpu_device_count": 1,
            "xpu_devices": [
                {
                    "index": 0,
                    "name": "Intel(R) UHD Graphics 770",
                    "uuid": "XPU-1",
                    "pci_bus_id": "0000:00:02.0",
                    "gcn_arch": "n/a",
                }
            ],
        },
        memory=[
            {
                "device": "cuda:0",
                "allocated_bytes": 1,
                "reserved_bytes": 2,
                "peak_allocated_bytes": 3,
                "peak_reserved_bytes": 4,
            }
        ],
        models=[
            {
                "name": "m",
                "class": "M",
                "params": 1,
                "device": "cuda:0",
                "devices": ["cuda:0"],
                "input_device": "cuda:0",
                "forward_calls": 1,
                "forward_rate_hz": 1.0,
                "last_forward_time": 1.0,
                "data_wait_fraction": 0.1,
                "data_wait_s": 0.1,
                "step_s": 0.1,
                "train_steps": 1,
                "step_rate_hz": 1.0,
                "step_source": "lightning",
                "shared_memory": False,
                "param_dtypes": ["float32"],
                "autocast": "off",
                "input_shape": [8, 3],
                "loader_settings": {
                    "num_workers": 2,
                    "pin_memory": True,
                    "persistent_workers": False,
                    "batch_size": 8,
                },
            }
        ],
        steps={
            "window_s": 10.0,
            "steps": 4,
            "step_s": 2.5,
            "data_wait_fraction": 0.5,
            "forward_fraction": 0.2,
            "optimizer_fraction": 0.1,
            "other_fraction": 0.2,
            "backward_fraction": 0.15,
        },
        math={
            "allow_tf32_matmul": False,
            "cudnn_allow_tf32": True,
            "float32_matmul_precision": "highest",
            "cudnn_benchmark": False,
        },
        syncs_per_step=3.0,
        events=[{"time": 1.0, "name": "e"}],
        errors=[{"time": 1.0, "where": "w", "message": "m"}],
        published_at=1.0,
    )
    return p
