"""A one-entry memo keyed on the identity of the arguments: a poll's facts are never changed once made, and shared (a
discovery poll hands every job the same GPU facts), so what is made of the very same objects is
made once per poll, and the entry is replaced by the next poll's."""

from __future__ import annotations

import functools
from collections.abc import Callable
from operator import is_
from typing import TypeVar

T = TypeVar("T")


def for_the_same_objects(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` again only for other argument objects (``is``, not ``==``: cheap, and facts
    are never changed in place). The entry is one tuple, replaced whole: a poller in another thread reads
    either the old one or the new one. It keeps its arguments alive until the next call."""
    last: list[tuple[tuple[object, ...], T] | None] = [None]

    @functools.wraps(fn)
    def memo(*args: object) -> T:
        hit = last[0]
        # Compared in C (all(map(is_, ...))): a hit costs a third of a Python loop's, and the verdict
        # asks several of these memos for each model at every poll.
        if hit is not None and len(hit[0]) == len(args) and all(map(is_, hit[0], args)):
            return hit[1]
        made = fn(*args)
        last[0] = (args, made)
        return made

    return memo
