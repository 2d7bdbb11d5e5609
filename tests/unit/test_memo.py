"""sidecar/common/memo.py: made again for other objects, even equal ones; not for the very same."""

from __future__ import annotations

from sidecar.common.memo import for_the_same_objects


def test_a_memo_answers_again_only_for_the_very_same_arguments():
    calls = []

    @for_the_same_objects
    def made(a, b):
        calls.append((a, b))
        return [a, b]

    a, b = (1, 2), (3,)
    first = made(a, b)
    assert made(a, b) is first and len(calls) == 1
    assert made(a, tuple([3])) == first and len(calls) == 2  # equal, another object: made again
    assert made(a, b) is not first and len(calls) == 3  # one entry: the last call's
    again = made(a, b)
    assert made(tuple([1, 2]), b) is not again and len(calls) == 4  # the first argument differs alone
    assert made(a, b) is not again and made(a, b) is made(a, b) and len(calls) == 5
    assert made.__name__ == "made"
