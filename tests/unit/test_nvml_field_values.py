"""nvmlDeviceGetFieldValues: the simulated driver's answers against its single getters, its
argument checks, the layout the sidecar reads, and the poll's use of the batch."""

from __future__ import annotations

import ctypes

import pynvml

from sidecar.sources.nvml import BATCHED_FIELDS, FIELD_VALUE_BYTES
from tests.fakenvml import gpu, scenarios

POWER_AVERAGE, POWER_INSTANT, LIMIT, TEMP, UNKNOWN = 185, 186, 190, 308, 3


def test_the_layout_is_the_bindings_and_the_ids_are_the_headers():
    assert ctypes.sizeof(pynvml.c_nvmlFieldValue_t) == FIELD_VALUE_BYTES == 40
    assert pynvml.c_nvmlFieldValue_t.nvmlReturn.offset == 28 and pynvml.c_nvmlFieldValue_t.value.offset == 32
    assert (pynvml.NVML_FI_DEV_POWER_AVERAGE, pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT) == (POWER_AVERAGE, LIMIT)
    assert dict(BATCHED_FIELDS) == {"power_w": POWER_AVERAGE, "power_limit_w": LIMIT, "temperature_c": TEMP}


FIELDS_VS_GETTERS = """
import json, pynvml
pynvml.nvmlInit()
out = []
def getter(fn, *args):
    try:
        return fn(*args)
    except pynvml.NVMLError as e:
        return "error %d" % e.value
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    values = pynvml.nvmlDeviceGetFieldValues(h, [185, 186, 190, 308, 3])
    fields = [(v.fieldId, v.nvmlReturn, v.valueType, v.value.dVal if v.valueType == 0 else v.value.uiVal,
               v.timestamp > 0) if v.nvmlReturn == 0 else (v.fieldId, v.nvmlReturn) for v in values]
    out.append({"fields": fields,
                "power": getter(pynvml.nvmlDeviceGetPowerUsage, h),
                "limit": getter(pynvml.nvmlDeviceGetEnforcedPowerLimit, h),
                "temperature": getter(pynvml.nvmlDeviceGetTemperature, h, 0),
                "cc": getter(pynvml.nvmlDeviceGetCudaComputeCapability, h)})
print(json.dumps(out))
"""


def test_each_field_answers_what_its_getter_does(fake_nvml):
    fake_nvml.write(
        {
            "gpus": [
                gpu(0, power_mw=123_456, power_limit_mw=300_000, temperature_c=61),  # an A100: GA100
                scenarios.tensor_heavy_gpu(None, index=1),  # an H100
                gpu(2, compute_capability=(8, 6), not_supported=["power_limit", "temperature"]),
                gpu(3, compute_capability=(9, 0), not_supported=["power"]),
            ]
        }
    )
    for d in fake_nvml.run(FIELDS_VS_GETTERS):
        by_id = {f[0]: f for f in d["fields"]}
        assert by_id[UNKNOWN] == [UNKNOWN, pynvml.NVML_ERROR_NOT_SUPPORTED]  # not modelled: per field
        # The average is Ampere-but-GA100-and-newer only (nvml.h); both are the getter's milliwatts.
        if d["power"] == "error 3":
            assert by_id[POWER_INSTANT][1] == by_id[POWER_AVERAGE][1] == pynvml.NVML_ERROR_NOT_SUPPORTED
        else:
            assert by_id[POWER_INSTANT] == [POWER_INSTANT, 0, 1, d["power"], True]
            cc = d["cc"][0] * 10 + d["cc"][1]
            expected = [POWER_AVERAGE, 0, 1, d["power"], True] if cc >= 86 else [POWER_AVERAGE, 3]
            assert by_id[POWER_AVERAGE] == expected
        assert by_id[LIMIT] == ([LIMIT, 3] if d["limit"] == "error 3" else [LIMIT, 0, 1, d["limit"], True])
        temp = d["temperature"]
        assert by_id[TEMP] == ([TEMP, 3] if temp == "error 3" else [TEMP, 0, 0, float(temp), True])


def test_the_calls_checks(fake_nvml):
    fake_nvml.write({"gpus": [gpu(0), gpu(1, lost=True)]})
    got = fake_nvml.run(
        """
        import ctypes, json, pynvml
        values = (pynvml.c_nvmlFieldValue_t * 2)()
        pynvml.nvmlInit()
        fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
        pynvml.nvmlShutdown()
        before = fn(None, 0, None)
        pynvml.nvmlInit()
        h0, h1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
        print(json.dumps([before, fn(h0, -1, values), fn(h0, 2, None), fn(h0, 0, None),
                          fn(ctypes.c_void_p(8), 2, values), fn(h1, 2, values), fn(h0, 2, values)]))
        """
    )
    # uninitialised, negative count, NULL array, nothing asked, a foreign handle, a lost GPU, fine
    assert got == [1, 2, 2, 0, 2, 15, 0]


COUNTING = """
import collections, pynvml
from sidecar.sources.nvml import NvmlSource
calls = collections.Counter()
_lookup = pynvml._nvmlGetFunctionPointer
def _counting(name):
    fn = _lookup(name)
    def counted(*args):
        calls[name] += 1
        return fn(*args)
    return counted
pynvml._nvmlGetFunctionPointer = _counting
src = NvmlSource()
"""


def test_the_poll_reads_power_limit_and_temperature_in_one_call(fake_nvml):
    """On an H100 all three come from the batch; on an A100 (no averaged power field) power from its
    getter and the other two from the batch; the values are the getters' either way."""
    fake_nvml.write({"gpus": [scenarios.tensor_heavy_gpu(None, index=0), gpu(1, power_mw=77_000, temperature_c=44)]})
    w = fake_nvml.worker()
    w(COUNTING)
    first = w("d = src.poll().devices; result = [(x.power_w, x.power_limit_w, x.temperature_c) for x in d]")
    assert first == [[600.0, 700.0, 65.0], [77.0, 400.0, 44.0]]
    w("calls.clear()")
    polls = 5
    got = w(f"d = [src.poll() for _ in range({polls})][-1].devices; result = dict(calls)")
    assert got["nvmlDeviceGetFieldValues"] == 2 * polls
    assert got.get("nvmlDeviceGetPowerUsage") == polls  # the A100's alone
    assert "nvmlDeviceGetEnforcedPowerLimit" not in got and "nvmlDeviceGetTemperature" not in got
    w("src.close()")
