"""The collector's inputs as the collect tests make them: values of int, str and dict subclasses (a
probe never sends them, msgpack cannot: the collector must still type them right), device names,
a process of a tree, and hostile payloads drawn from a seeded random.Random.
"""

from __future__ import annotations

import math
import random
from typing import Any

from probe_wire.schema import DEVICE_MIXED, DEVICE_NO_PARAMETERS, MODEL_COLLECTED, PUBLISH_FAILED
from sidecar.sources.proctree import ProcInfo


class Int(int):
    pass


class Str(str):
    pass


class Dict(dict):
    """A dict subclass (never from msgpack): read through .get as before."""


DEVICES = [
    "cuda:0",
    "cuda:1",
    "cuda:7",
    "cpu",
    "mps",
    "xpu:0",
    DEVICE_MIXED,
    DEVICE_NO_PARAMETERS,
    "",
    "cuda:²",
]


def proc_info(
    pid: int, cmdline=("python", "train.py"), name: Any = "python", ppid: int | None = 1, depth: int = 1
) -> ProcInfo:
    return ProcInfo(pid, ppid, 1000 + pid, 1.0, name, cmdline, 1.0, 10.0, depth)


# ---------------------------------------------------------------------------------------------
# History samples and whole polls, over fixed seeds: the frozen outcomes
# ---------------------------------------------------------------------------------------------
class Draw:
    """Hostile values from a seeded random.Random, as the strategies above draw them (hypothesis
    draws differ from run to run and version to version; a digest needs the same inputs)."""

    TEXTS = [*DEVICES, "train", "nccl", "rank", "ResNet", "lightning", "é" * 70, "é" * 300]

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def atom(self) -> Any:
        r, rng = self.rng.random(), self.rng
        if r < 0.1:
            return None
        if r < 0.2:
            return rng.random() < 0.5
        if r < 0.4:
            return rng.choice([0, 1, -1, 255, 256, 2**63, -(2**70), rng.randint(-1000, 1000), Int(3)])
        if r < 0.6:
            return rng.choice(
                [0.0, -0.0, 1e308, -1e308, 0.5, math.nan, math.inf, -math.inf, rng.uniform(-10, 10)]
            )
        if r < 0.9:
            text = rng.choice(self.TEXTS)
            return Str(text) if rng.random() < 0.1 else text
        return b"bytes"

    def junk(self, depth: int = 0) -> Any:
        r = self.rng.random()
        if depth < 2 and r < 0.1:
            return [self.junk(depth + 1) for _ in range(self.rng.randint(0, 3))]
        if depth < 2 and r < 0.2:
            return {str(self.rng.randint(0, 9)): self.junk(depth + 1) for _ in range(self.rng.randint(0, 3))}
        return self.atom()

    def maybe(self, good) -> Any:
        return good() if self.rng.random() < 0.75 else self.junk()

    def number(self) -> Any:
        return self.maybe(lambda: self.rng.choice([None, 0, 3, 48, 2.5, 20.0, 0.05, self.atom()]))

    def model(self) -> Any:
        rng = self.rng
        m = {
            "name": self.maybe(lambda: rng.choice(self.TEXTS)),
            "class": self.maybe(lambda: rng.choice(self.TEXTS)),
            "device": self.maybe(lambda: rng.choice(DEVICES)),
            "devices": self.maybe(
                lambda: [rng.choice([*DEVICES, self.atom()]) for _ in range(rng.randint(0, 10))]
            ),
            "loader_settings": self.maybe(lambda: {"num_workers": self.number(), "pin_memory": self.atom()}),
            "input_shape": self.maybe(lambda: [self.number() for _ in range(rng.randint(0, 4))]),
            "param_dtypes": self.maybe(lambda: [rng.choice(["float32", "bfloat16", self.atom()])]),
        }
        for key in ("params", "forward_calls", "forward_rate_hz", "data_wait_fraction", "train_steps",
                    "step_rate_hz", "data_wait_batches", "shared_memory", "autocast", "step_source", "input_device"):  # fmt: skip
            m[key] = self.number() if rng.random() < 0.7 else self.atom()
        keep = [k for k in m if rng.random() < 0.8]
        out = {k: m[k] for k in keep}
        return Dict(out) if rng.random() < 0.1 else out

    def payload(self) -> dict:
        rng = self.rng
        p = {
            "schema": 1,
            "role": self.maybe(lambda: rng.choice(["main", "dataloader-worker", "rank", "child"])),
            "rank": self.number(),
            "local_rank": self.number(),
            "world_size": self.number(),
            "dist_backend": self.maybe(lambda: rng.choice([None, "nccl", "r" * 70])),
            "runtime": rng.choice([{"torch": "2.5"}, {}, None, "x"]),
            "memory": [
                {"device": "cuda:0", "reserved_bytes": self.number()} for _ in range(rng.randint(0, 2))
            ],
            "models": [self.model() if rng.random() < 0.9 else self.atom() for _ in range(rng.randint(0, 4))],
            "errors": rng.choice(
                [
                    [],
                    [{"where": PUBLISH_FAILED, "message": self.atom()}],
                    [{"where": MODEL_COLLECTED, "message": "Old"}],
                ]
            ),
            "steps": self.maybe(
                lambda: {
                    "window_s": self.number(),
                    "steps": self.number(),
                    "data_wait_fraction": self.number(),
                }
            ),
            "syncs_per_step": self.number(),
        }
        keep = {k: v for k, v in p.items() if rng.random() < 0.85}
        return Dict(keep) if rng.random() < 0.05 else keep
