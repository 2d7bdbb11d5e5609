"""What the programs under tests/programs print and how tests/integration/test_programs.py reads it.

A program writes one line per fact, each with a single write(2) so that the lines of processes
sharing a pipe (ranks, hogwild children) never interleave:

    dsh-program loss TAG STEP VALUE      (VALUE: repr of the float, exact)
    dsh-program forwards PID COUNT       (the registered model's forward calls this process made)
    dsh-program native-threads PID BEFORE AFTER   (threads Python did not start, before the process
                                         group and after its teardown: torchrun_ddp.py)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

PREFIX = "dsh-program"


def say(kind: str, *values: object) -> None:
    os.write(1, (" ".join([PREFIX, kind, *map(str, values)]) + "\n").encode())


def loss(tag: object, step: int, value: float) -> None:
    say("loss", tag, step, repr(float(value)))


def forwards(count: int) -> None:
    say("forwards", os.getpid(), count)


@dataclass
class Printed:
    """What one run printed: losses by (tag, step) and forward counts by pid."""

    losses: dict[tuple[str, int], float] = field(default_factory=dict)
    forwards: dict[int, int] = field(default_factory=dict)
    native_threads: dict[int, tuple[int, int]] = field(default_factory=dict)


def parse(lines: list[str]) -> Printed:
    out = Printed()
    for line in lines:
        parts = line.split()
        if len(parts) < 2 or parts[0] != PREFIX:
            continue
        if parts[1] == "loss":
            key = (parts[2], int(parts[3]))
            assert key not in out.losses, f"loss {key} printed twice"
            out.losses[key] = float(parts[4])
        elif parts[1] == "forwards":
            out.forwards[int(parts[2])] = int(parts[3])
        elif parts[1] == "native-threads":
            out.native_threads[int(parts[2])] = (int(parts[3]), int(parts[4]))
    return out
