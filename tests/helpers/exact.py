"""Values compared exactly: a canonical form that tells apart what == does not (types, float bits,
dict order), and a call's outcome as that form or the type of what it raised.
"""

from __future__ import annotations

from array import array
from dataclasses import fields, is_dataclass
from typing import Any

from sidecar.poll import history


def canon(x: Any) -> Any:
    """``x`` as nested tuples that tell apart what == does not: types (1, True, 1.0), float bits
    (-0.0, NaN), dict order; a history sample by its packed rows."""
    if isinstance(x, float):
        return ("float", x.hex() if x == x else "nan")
    if isinstance(x, bool | int | str | bytes) or x is None:
        return (type(x).__name__, x)
    if isinstance(x, array):
        return ("array", x.typecode, x.tobytes().hex())
    if isinstance(x, history.Sample):
        return (
            "Sample",
            *(canon(getattr(x, name)) for name in ("time", "_gpus", "_processes", "_job", "recent")),
        )
    if is_dataclass(x):
        return (type(x).__name__, *((f.name, canon(getattr(x, f.name))) for f in fields(x)))
    if isinstance(x, set | frozenset):
        return ("set", *sorted(map(canon, x), key=repr))
    if isinstance(x, dict):
        return (type(x).__name__, *((canon(k), canon(v)) for k, v in x.items()))
    if isinstance(x, tuple | list):
        return (type(x).__name__, *map(canon, x))
    return (type(x).__name__, repr(x))


def outcome(fn, *args) -> Any:
    """A call's canonical result, or the type of what it raised."""
    try:
        return canon(fn(*args))
    except Exception as exc:  # noqa: BLE001 -- hostile input: what it raises is part of the outcome
        return ("raises", type(exc).__name__)
