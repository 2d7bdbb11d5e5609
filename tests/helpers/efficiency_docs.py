"""Hand-made status and history documents (schema 2, checked against sidecar/documents/contract.py) and a
server source that serves them: an H100 held down by heat with GPM figures, an A100 in MIG mode, a
machine without an NVIDIA GPU, and data waits over two windows. The page's and the DSH plugin's
browser tests drive the page on them.
"""

from __future__ import annotations

import time
from typing import Any

from sidecar.documents import contract

NOW = time.time()
GPM_UNSUPPORTED = "GPM not supported on this GPU (compute capability 8.0)"
GPM_FIELDS = (
    "sm_activity_fraction",
    "sm_occupancy_fraction",
    "tensor_activity_fraction",
    "dram_activity_fraction",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
    "nvlink_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s",
)


def blank(t: Any) -> Any:
    """The smallest valid value of a contract type: every key present, nullable ones null."""
    if isinstance(t, contract.Lazy):
        t = contract.object_types()[t.name]
    if isinstance(t, contract.Obj):
        return {k: None if f.null else blank(f.type) for k, f in t.fields.items()}
    if isinstance(t, contract.ListOf):
        return []
    if isinstance(t, contract.MapOf):
        return {}
    if isinstance(t, contract.Enum):
        return t.values[0]
    if isinstance(t, contract.OneOf):
        return blank(t.options[0])
    return {"integer": 0, "number": 0.0, "string": "", "boolean": False}[t.json]


def obj(type_name: str, /, **values: Any) -> dict:
    out = blank(contract.object_types()[type_name])
    unknown = set(values) - set(out)
    assert not unknown, f"{type_name} has no {sorted(unknown)}"
    return {**out, **values}


def ref(id_: str, **params: Any) -> dict:
    return {"id": id_, "params": params}


def status_doc(
    gpus: list[dict], processes: list[dict], *, nvml_ok: bool = True, model_gpu: int | None = 0
) -> dict:
    doc = obj(
        "StatusDocument",
        schema=2,
        time_unix_s=NOW,
        interval_s=1.0,
        job_id="4242-1",
        target=obj("Target", pid=4242, alive=True, name="python", create_time_unix_s=NOW - 600),
        status="GPU" if gpus else "CPU",
        message="Model net runs somewhere.",
        message_ref=ref("message.gpu", model="net", device="cuda:0" if gpus else "cpu"),
        model_device="cuda:0" if gpus else "cpu",
        input_device="cuda:0" if gpus else "cpu",
        model_gpu_index=model_gpu,
        runtime=obj("Runtime", torch="2.13.0", cuda_available=bool(gpus), device_count=len(gpus)),
        nvml=obj(
            "Nvml",
            ok=nvml_ok,
            driver="560.35" if nvml_ok else None,
            error=None if nvml_ok else "NVML Shared Library Not Found",
        ),
        gpus=gpus,
        processes=processes,
    )
    contract.check(doc, "status")
    return doc


def main_process(gpu_rows: list[dict], *, device: str) -> dict:
    loader = obj("LoaderSettings", num_workers=2, pin_memory=False, persistent_workers=False, batch_size=64)
    model = obj(
        "Model",
        name="net",
        device=device,
        devices=[device],
        param_count=11_689_512,
        forward_calls=1200,
        forward_rate_hz=12.5,
        param_dtypes=["float32"],
        autocast="off",
        input_shape=[64, 3, 224, 224],
        loader_settings=loader,
    )
    steps = obj(
        "StepBreakdown",
        window_s=10.0,
        steps=120,
        step_s=0.085,
        data_wait_fraction=0.4,
        forward_fraction=0.3,
        optimizer_fraction=0.1,
        other_fraction=0.2,
    )
    math = obj(
        "MathSettings", allow_tf32_matmul=False, cudnn_allow_tf32=True, float32_matmul_precision="highest"
    )
    return obj(
        "Process",
        pid=4242,
        depth=0,
        role="main",
        has_probe=True,
        probe_state="ok",
        name="python",
        cpu_pct=97.0,
        rss_mib=2048.0,
        models=[model],
        gpu=gpu_rows,
        step_breakdown=steps,
        math=math,
        syncs_per_step=3.0,
    )


def h100() -> dict:
    return obj(
        "Gpu",
        index=0,
        uuid="GPU-h100",
        name="NVIDIA H100 80GB HBM3",
        util_pct=93.0,
        mem_used_mib=30_000.0,
        mem_total_mib=81_559.0,
        framework_index=0,
        compute_capability="9.0",
        sm_clock_mhz=1200,
        sm_clock_max_mhz=1980,
        mem_clock_mhz=2619,
        clock_event_reasons=["sw_power_cap", "hw_thermal_slowdown"],
        power_w=350.0,
        power_limit_w=700.0,
        temperature_c=87.0,
        pcie_link_gen=3,
        pcie_link_gen_max=5,
        pcie_link_width=16,
        pcie_link_width_max=16,
        sm_activity_fraction=0.62,
        sm_occupancy_fraction=0.31,
        tensor_activity_fraction=0.05,
        dram_activity_fraction=0.4,
        pcie_tx_bytes_per_s=1.5e9,
        pcie_rx_bytes_per_s=3e8,
        mig_mode=False,
    )


def a100_mig() -> dict:
    mig = [
        obj(
            "MigDevice",
            index=i,
            uuid=f"MIG-{i}",
            gpu_instance_id=i + 1,
            compute_instance_id=0,
            mem_used_mib=u,
            mem_total_mib=9856.0,
        )
        for i, u in ((0, 12.0), (1, 4200.0))
    ]
    return obj(
        "Gpu",
        index=0,
        uuid="GPU-a100",
        name="NVIDIA A100-SXM4-80GB",
        util_pct=None,
        mem_used_mib=4212.0,
        mem_total_mib=81_920.0,
        framework_index=0,
        field_errors={f: GPM_UNSUPPORTED for f in GPM_FIELDS} | {"util_pct": "Not Supported"},
        compute_capability="8.0",
        sm_clock_mhz=1410,
        sm_clock_max_mhz=1410,
        clock_event_reasons=[],
        power_w=90.0,
        power_limit_w=400.0,
        temperature_c=40.0,
        pcie_link_gen=4,
        pcie_link_gen_max=4,
        pcie_link_width=16,
        pcie_link_width_max=16,
        mig_mode=True,
        mig_devices=mig,
    )


def history_doc(*, gpu: bool, later_s: float = 0.0) -> dict:
    samples = []
    for k in range(20):
        t = NOW - 20 + k + later_s
        gpus = (
            [
                obj(
                    "SampleGpu",
                    index=0,
                    util_pct=90.0 + k % 3,
                    mem_used_mib=30_000.0,
                    sm_activity_fraction=0.6,
                    sm_occupancy_fraction=0.3,
                    tensor_activity_fraction=0.05,
                    sm_clock_mhz=1200,
                    power_w=340.0 + k,
                    temperature_c=85.0,
                )
            ]
            if gpu
            else []
        )
        samples.append(
            obj(
                "Sample",
                time_unix_s=t,
                gpus=gpus,
                cpu_pct=150.0 + k,
                rss_mib=2000.0 + 10 * k,
                forward_rate_hz=12.0,
                step_rate_hz=None if gpu else 4.0,
            )
        )
    doc = obj("HistoryDocument", schema=2, interval_s=1.0, job_id="4242-1", samples=samples)
    contract.check(doc, "history")
    return doc


class FixedSource:
    """Serves one status document and its history, as the server's source (document.OneJob's API)."""

    interval_s = 1.0

    def __init__(self, status: dict, history: dict):
        self.status, self.history = status, history

    def snapshot(self):
        return self.status, self.status["time_unix_s"]

    def status_document(self, job=None):
        return self.status

    def history_document(self, job=None, since=None):
        return {
            **self.history,
            "samples": [s for s in self.history["samples"] if since is None or s["time_unix_s"] > since],
        }

    def jobs_document(self):
        return None


def gpu_page_doc() -> tuple[dict, dict]:
    main = main_process(
        [obj("ProcessGpu", index=0, mem_used_mib=29_000.0, sm_util_pct=88.0)], device="cuda:0"
    )
    return status_doc([h100()], [main]), history_doc(gpu=True)


def data_wait_doc() -> tuple[dict, dict]:
    """The main process: its step breakdown waits 40 % of the last 10 s, its model's loader 90 % of
    its last 64 batches (two windows, two figures). A helper without a breakdown: two models, the
    second waiting more (70 % of 12 batches)."""
    main = main_process(
        [obj("ProcessGpu", index=0, mem_used_mib=29_000.0, sm_util_pct=88.0)], device="cuda:0"
    )
    main["models"][0].update(data_wait_fraction=0.9, data_wait_batches=64)
    loader = [
        obj(
            "Model",
            name=f"m{i}",
            device="cuda:0",
            devices=["cuda:0"],
            data_wait_fraction=w,
            data_wait_batches=n,
        )
        for i, (w, n) in enumerate(((0.1, 64), (0.7, 12)))
    ]
    helper = obj(
        "Process",
        pid=4343,
        ppid=4242,
        depth=1,
        role="child",
        has_probe=True,
        probe_state="ok",
        name="python",
        models=loader,
    )
    return status_doc([h100()], [main, helper]), history_doc(gpu=True)
