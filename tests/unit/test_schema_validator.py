"""The generated validators (the whole payload's, and the rest's a follower uses after a payload's
prefix) accept exactly what the field-naming checker accepts, with the same clean copy, on a payload
that sets every field the schema has: each map at every depth, each key missing, each value odd."""

from __future__ import annotations

import math

import msgpack
from hypothesis import example, given, settings
from hypothesis import strategies as st

from probe_wire.schema import PREFIX_KEYS, _fast_validate, _slow_validate, validate_payload, validate_rest
from tests.helpers.hypothesis_profiles import examples
from tests.helpers.payloads import json_like, mutated, payload_paths, rich_payload


def _full_payload() -> dict:
    """The probe's payload with every field added within schema 1 set too, and two of each list."""
    p = rich_payload(7)
    p["loader"] = "train"
    p["runtime"]["cuda_driver_loadable"] = True
    p["runtime"].update(hip_build="6.4.43482", hip_visible_devices="0,1", rocr_visible_devices="GPU-abcd")
    p["memory"] = p["memory"] * 2
    model = p["models"][0]
    model.update(
        param_dtypes=["float32", "bfloat16"],
        autocast="bfloat16",
        input_shape=[32, 3, 224, 224],
        loader_settings={
            "num_workers": 4,
            "pin_memory": True,
            "persistent_workers": False,
            "batch_size": 32,
            "prefetch_factor": 2,
        },
        compiled_uncounted=True,
        data_wait_batches=64,
    )
    p["models"] = [model, {**model, "name": "head", "loader_settings": None}]
    p["events"].append({"time": 3.0, "name": "second"})
    p["steps"] = {
        "window_s": 10.0,
        "steps": 200,
        "step_s": 0.05,
        "data_wait_fraction": 0.1,
        "forward_fraction": 0.3,
        "optimizer_fraction": 0.2,
        "other_fraction": 0.4,
        "backward_fraction": 0.3,
    }
    p["math"] = {
        "allow_tf32_matmul": True,
        "cudnn_allow_tf32": True,
        "float32_matmul_precision": "high",
        "cudnn_benchmark": False,
    }
    p["syncs_per_step"] = 2.0
    return p


_FULL_PATHS = sorted(payload_paths(_full_payload()), key=repr)
_ODD = st.sampled_from(
    [None, True, False, 0, 1, -1, 2**64 - 1, 0.0, -0.0, 1.5, math.inf, -math.inf, math.nan, 5e-324,
     1.7976931348623157e308, "", "x" * 4096, "x" * 4097, [], {}, [1.0], {"a": 1}]
)


def _packed(value) -> bytes:
    # msgpack tells 1, 1.0 and True apart where == does not.
    return msgpack.packb(value, use_bin_type=True)


@settings(max_examples=examples(2500), deadline=None)
@given(path=st.sampled_from(_FULL_PATHS), value=_ODD | json_like, drop=st.booleans())
@example(path=("steps", "window_s"), value=math.inf, drop=False)
@example(path=("models", 1, "loader_settings"), value={"num_workers": 1}, drop=False)
def test_the_generated_validators_agree_with_the_checker_on_every_field(path, value, drop):
    payload = mutated(_full_payload(), path, value, drop)
    slow, reason = _slow_validate(payload)
    fast = _fast_validate(payload)
    assert (fast is None) == (slow is None), (path, value, reason)
    if fast is not None:
        assert _packed(fast) == _packed(slow)
    assert validate_payload(payload) == ((slow, None) if slow is not None else (None, reason))
    rest = {k: v for k, v in payload.items() if k not in PREFIX_KEYS}
    rest_clean = validate_rest(rest)
    if path[0] in PREFIX_KEYS or (slow is None) == (rest_clean is None):
        # (a bad prefix key makes the whole payload fail and leaves the rest valid)
        if slow is not None:
            assert rest_clean is not None
            assert _packed(rest_clean) == _packed({k: v for k, v in slow.items() if k not in PREFIX_KEYS})
    else:
        raise AssertionError((path, value, reason, rest_clean))


def test_the_full_payload_is_valid_and_copied_whole():
    payload = _full_payload()
    clean = _fast_validate(payload)
    assert clean is not None and _packed(clean) == _packed(payload) and clean is not payload


@given(st.floats())
@example(math.inf)
@example(-math.inf)
@example(math.nan)
@example(1.7976931348623157e308)
def test_a_float_is_accepted_exactly_when_it_is_finite(x):
    assert (validate_rest({**_rest_of_full(), "syncs_per_step": x}) is not None) == math.isfinite(x)


def _rest_of_full() -> dict:
    return {k: v for k, v in _full_payload().items() if k not in PREFIX_KEYS}
