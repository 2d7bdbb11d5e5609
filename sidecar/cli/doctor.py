"""`dsh-sidecar doctor`: what a newcomer runs first. Driver, GPUs, OS graphics devices, and what
the training interpreter's torch can do, each problem with the command that fixes it."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from probe_wire.records import RuntimeRecord
from sidecar.cli.args import host_paths
from sidecar.common import catalogue
from sidecar.common.exit_codes import EXIT_OK, EXIT_PROBLEMS
from sidecar.documents.bounds import json_text, one_line_all
from sidecar.poll.collect import system_gpu_facts
from sidecar.sources.host import HOST, HostPaths
from sidecar.sources.segment_dir import SHM_DIR, planted_names
from sidecar.verdict import Facts, GpuFacts, cpu_build_hint, cuda_unavailable_reason

# Runs in the user's interpreter: it may have a broken torch, so everything is guarded and the
# result is one JSON line. Initialising CUDA here is fine: this process exits right after.
_TORCH_PROBE = r"""
import importlib, json, os, sys
out = {"python": sys.version.split()[0], "executable": sys.executable, "torch": None, "error": None,
       "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
try:
    torch = importlib.import_module("torch")  # in the user's interpreter, never in the sidecar
    out["torch"] = torch.__version__
    out["cuda_build"] = torch.version.cuda
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
    out["cudnn"] = torch.backends.cudnn.version() if out["cuda_available"] else None
    out["devices"] = [{"index": i, "name": torch.cuda.get_device_name(i),
                       "uuid": str(getattr(torch.cuda.get_device_properties(i), "uuid", "") or "") or None}
                      for i in range(out["device_count"])]
    if out["cuda_build"] and not out["cuda_available"]:
        try:
            torch.cuda.init()
        except Exception as exc:
            out["cuda_init_error"] = str(exc).splitlines()[0][:300]
        # What the probe publishes as cuda_driver_loadable (probe/facts.py): NVML answers without it.
        try:
            import ctypes
            ctypes.CDLL("libcuda.so.1")
            out["cuda_driver_loadable"] = True
        except OSError:
            out["cuda_driver_loadable"] = False
    mps = getattr(torch.backends, "mps", None)
    out["mps_available"] = bool(mps and mps.is_available())
except ImportError as exc:
    out["error"] = f"torch is not installed in this interpreter ({exc})"
except Exception as exc:
    out["error"] = f"importing torch failed: {type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def torch_report(python: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """What `python`'s torch can do; `python_error` instead when that Python cannot be run at all
    (then installing torch into it is no fix)."""
    try:
        proc = subprocess.run([python, "-c", _TORCH_PROBE], capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        where = "no such file" if os.sep in python else "no such command on the PATH"
        return {"python_error": f"the Python {python} is missing ({where})"}
    except OSError as exc:  # a directory, a file without execute permission, not a program
        return {"python_error": f"the Python {python} cannot be run ({exc.strerror or exc})"}
    except subprocess.TimeoutExpired:
        return {"error": f"{python} took over {timeout_s:.0f} s to import torch"}
    try:
        report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])  # _TORCH_PROBE's one object
        return report
    except (ValueError, IndexError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"{python} failed: {tail[0][:300]}"}


SHOWN_EXAMPLES = 5


def segment_name_findings(shm_dir: str = SHM_DIR, host: HostPaths = HOST) -> dict[str, Any]:
    """Segment names that someone else holds (sources/segment_dir.py planted_names), for the report:
    each kind counted in full, listed in part."""
    found = planted_names(shm_dir, host=host)
    return {
        "links_count": found.links_count,
        "links": list(found.links),
        "foreign_files_count": found.foreign_files_count,
        "foreign_files": list(found.foreign_files),
    }


def _segment_problems(found: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    if found["links"]:
        out.append(
            {
                "problem": f"{found['links_count']} link(s) or non-files planted under probe segment names "
                f"({'; '.join(found['links'][:SHOWN_EXAMPLES])}): probes never write through them and "
                "publish as dsh-probe.PID.START_TICKS instead",
                "fix": "remove them (`sudo find /dev/shm -maxdepth 1 -name 'dsh-probe.*' ! -type f -delete`) "
                "and find out who planted them",
            }
        )
    if found["foreign_files"]:
        out.append(
            {
                "problem": f"{found['foreign_files_count']} probe segment file(s) owned by another user "
                f"({'; '.join(found['foreign_files'][:SHOWN_EXAMPLES])}): the sidecar ignores them",
                "fix": "remove them (`sudo rm /dev/shm/dsh-probe.PID`) and ask their owner why they are there",
            }
        )
    return out


# How to point doctor at the training job's own interpreter (the sidecar's may have no torch).
OTHER_PYTHON = '`dsh-sidecar doctor --python /path/to/python` (e.g. `--python "$(which python)"` in the job\'s environment)'


def collect(python: str, host: HostPaths = HOST) -> dict[str, Any]:
    """The report; /proc and /sys are ``host``'s (--path.procfs, --path.sysfs)."""
    from sidecar.sources.nvml import nvml_summary
    from sidecar.sources.sysfs import list_system_gpus

    nvml = nvml_summary()
    system = list_system_gpus(host=host)
    torch = torch_report(python)
    gpus = tuple(
        GpuFacts(d["index"], uuid=d.get("uuid"), name=d.get("name"), pci_bus_id=d.get("pci_bus_id"))
        for d in nvml.get("devices") or ()
    )
    facts = Facts(
        target_pid=0,
        nvml_ok=bool(nvml.get("library_found") and not nvml.get("error")),
        nvml_error=nvml.get("error"),
        driver=nvml.get("driver"),
        cuda_driver=nvml.get("cuda_driver"),
        gpus=gpus,
        system_gpus=system_gpu_facts(system, gpus),
    )
    problems: list[dict[str, str]] = []
    nvidia_os = any(s.vendor == "NVIDIA" for s in facts.system_gpus)
    if not facts.nvml_ok:
        if nvidia_os:
            problems.append(
                {
                    "problem": f"the OS sees an NVIDIA GPU but NVML is not usable: {facts.nvml_error}",
                    "fix": "install the NVIDIA driver (e.g. `sudo apt install nvidia-driver` / `sudo ubuntu-drivers install`) "
                    "and reboot; `nvidia-smi` must work",
                }
            )
    for d in nvml.get("devices") or ():
        if d.get("error"):
            problems.append(
                {
                    "problem": f"{d['error']}: the driver lists it but it cannot be used",
                    "fix": f"`nvidia-smi -q -i {d['index']}` and the kernel log (`sudo dmesg | grep -i xid`); "
                    "a GPU that fell off the bus needs a reset (`sudo nvidia-smi -r -i "
                    f"{d['index']}`, with nothing running on it) or a reboot",
                }
            )
    problems.extend(_torch_problems(torch, python, facts, bool(gpus) or nvidia_os))
    shm = segment_name_findings(host=host)
    problems.extend(_segment_problems(shm))
    unusable = [s for s in facts.system_gpus if s.nvml_index is None and s.vendor != "NVIDIA"]
    return {
        "amdsmi": amdsmi_report(any(s.driver == "amdgpu" for s in system)),
        "python": python,
        # a venv's python is a link to the base interpreter: compare the paths, not the files
        "python_is_sidecars": os.path.abspath(python) == os.path.abspath(sys.executable),
        "shm": shm,
        "nvml": nvml,
        "system_gpus": [
            {"vendor": s.vendor, "name": s.name, "pci": s.pci, "driver": s.driver, "nvml_index": s.nvml_index}
            for s in facts.system_gpus
        ],
        "torch": torch,
        "cannot_run_cuda": [s.name for s in unusable],
        "problems": problems,
    }


def amdsmi_report(amd_card: bool) -> dict[str, Any] | None:
    """Whether amdsmi (the optional ``[amd]`` extra) loaded; None where no amdgpu card is listed
    (the import is not tried)."""
    if not amd_card:
        return None
    from sidecar.sources.amdsmi_source import LOADER

    reader = LOADER.get()
    return {
        "loaded": reader is not None,
        "gpus": len(reader.pcis) if reader else 0,
        "problem": LOADER.problem,
    }


def _amdsmi_lines(amd: dict[str, Any] | None) -> list[str]:
    """The line saying whether amdsmi loaded; none where no amdgpu card is listed."""
    if not amd:
        return []
    if amd["loaded"]:
        return [f"[ok] amdsmi (the [amd] extra) loaded: {amd['gpus']} AMD GPU(s)"]
    return [f"[--] amdsmi not loaded, AMD figures from sysfs alone: {amd['problem']}"]


def _torch_problems(
    torch: dict[str, Any], python: str, facts: Facts, nvidia_here: bool
) -> list[dict[str, str]]:
    """What keeps the torch of ``python`` from the GPU, with the fix: not installed, a CPU-only
    build, or CUDA unavailable (and why, in the verdict's words)."""
    problems: list[dict[str, str]] = []
    if torch.get("python_error"):
        problems.append(
            {
                "problem": torch["python_error"],
                "fix": f"give the Python your training job runs under: {OTHER_PYTHON}",
            }
        )
    elif torch.get("error"):
        problems.append(
            {
                "problem": f"{torch['error']}: {python}",
                "fix": f"if your training job runs under {python}: `{python} -m pip install torch`; "
                f"else check the Python it runs under: {OTHER_PYTHON}",
            }
        )
    elif torch.get("cuda_build") is None:
        if nvidia_here:
            problems.append(
                {
                    "problem": f"torch {torch['torch']} is a CPU-only build: it cannot use the NVIDIA GPU",
                    # The verdict's hint: the same torch version, from an index whose CUDA the driver runs.
                    "fix": catalogue.render(cpu_build_hint(torch.get("torch"), facts.cuda_driver)),
                }
            )
    elif not torch.get("cuda_available"):
        # The verdict's own diagnosis, on the facts a probe would publish from that interpreter.
        reason_ref, hint_ref = cuda_unavailable_reason(facts, _runtime(torch))
        reason, hint = catalogue.render(reason_ref), catalogue.render(hint_ref)
        if torch.get("cuda_init_error"):
            reason += f" (torch says: {torch['cuda_init_error']})"
        problems.append({"problem": f"CUDA is not available to torch: {reason}", "fix": hint})
    return problems


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _runtime(torch: dict[str, Any]) -> RuntimeRecord:
    """The interpreter's torch report (JSON from another program) as the runtime record a probe
    publishes: only what is of its field's type."""
    available, loadable = torch.get("cuda_available"), torch.get("cuda_driver_loadable")
    count, mps = torch.get("device_count"), torch.get("mps_available")
    return RuntimeRecord(
        torch=_text(torch.get("torch")),
        cuda_build=_text(torch.get("cuda_build")),
        cuda_available=available if isinstance(available, bool) else None,
        cuda_visible_devices=_text(torch.get("cuda_visible_devices")),
        cuda_driver_loadable=loadable if isinstance(loadable, bool) else None,
        device_count=count if isinstance(count, int) and not isinstance(count, bool) else None,
        mps_available=mps if isinstance(mps, bool) else None,
    )


def render(report: dict[str, Any]) -> str:
    ok, bad, note = "[ok]", "[!!]", "[--]"
    lines = ["dsh-sidecar doctor", ""]
    nv = report["nvml"]
    if nv.get("library_found") and not nv.get("error"):
        lines.append(
            f"{ok} NVIDIA driver {nv.get('driver')} (CUDA {nv.get('cuda_driver')}), {nv.get('device_count')} GPU(s)"
        )
        for d in nv.get("devices") or ():
            state = f"  [!!] {d['error']}" if d.get("error") else ""
            lines.append(f"       GPU {d['index']}: {d.get('name')} {d.get('uuid') or ''}{state}")
    else:
        lines.append(f"{note} NVIDIA driver: {nv.get('error') or 'not found'}")
    if report["system_gpus"]:
        lines.append(f"{ok} graphics devices the OS sees: {len(report['system_gpus'])}")
        for s in report["system_gpus"]:
            usable = "usable by CUDA" if s["nvml_index"] is not None else "cannot run CUDA"
            if s["vendor"] == "NVIDIA" and s["nvml_index"] is None:
                usable = "NVIDIA, but the driver does not list it"
            lines.append(f"       {s['pci']}: {s['name']} [{s['driver'] or 'no driver'}] ({usable})")
    else:
        lines.append(f"{note} graphics devices the OS sees: none")
    lines.extend(_amdsmi_lines(report.get("amdsmi")))
    t = report["torch"]
    python = report.get("python") or t.get("executable")
    whose = "the Python dsh-sidecar runs under" if report.get("python_is_sidecars") else "given with --python"
    lines.append(f"{note} Python checked for torch: {python} ({whose}); another: {OTHER_PYTHON}")
    if t.get("python_error"):
        lines.append(f"{bad} Python: {t['python_error']}")
    elif t.get("error"):
        lines.append(f"{bad} torch: {t['error']} ({python})")
    else:
        build = f"CUDA {t['cuda_build']} build" if t.get("cuda_build") else "CPU-only build"
        mark = (
            ok
            if t.get("cuda_available")
            else bad
            if (t.get("cuda_build") or report["nvml"].get("device_count"))
            else note
        )
        lines.append(
            f"{mark} torch {t['torch']} ({build}) in {t.get('executable')}: "
            f"CUDA available: {t.get('cuda_available')}, devices: {t.get('device_count')}"
        )
        if t.get("cuda_visible_devices") is not None:
            lines.append(f"       CUDA_VISIBLE_DEVICES={t['cuda_visible_devices']!r}")
    lines.append("")
    if report["problems"]:
        lines.append("Problems, and how to fix them:")
        for p in report["problems"]:
            lines.append(f"  - {p['problem']}")
            lines.append(f"    fix: {p['fix']}")
    elif not report["torch"].get("cuda_available"):
        lines.append("No NVIDIA GPU here: training runs on the CPU, as expected on this machine.")
    else:
        lines.append(
            "All good: torch can use the GPU. Attach with `dsh-sidecar --pid PID` or `dsh-sidecar run -- python train.py`."
        )
    return "\n".join(lines)


def run_doctor(args: argparse.Namespace) -> int:
    """Print the report; EXIT_PROBLEMS when it lists a problem (each `[!!]` has one), so a script or
    CI step can stop on it."""
    report = collect(args.python, host_paths(args))
    if args.json:
        print(json_text(report, indent=2))
    else:  # segment names, paths and errors are other programs' text: one line each, no escapes
        print(render(one_line_all(report)))
    sys.stdout.flush()
    return EXIT_PROBLEMS if report["problems"] else EXIT_OK
