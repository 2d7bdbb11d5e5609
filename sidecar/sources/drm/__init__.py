"""Per-process GPU use from the kernel's DRM client usage stats (``/proc/<pid>/fdinfo``), for every
driver that prints them: amdgpu, i915, xe and others. ``read_drm_clients`` reads one instant;
``DrmSampler`` turns two into utilisation. ROCm compute goes through /dev/kfd and shows in none of
this: ``sidecar/sources/kfd.py`` reads it."""

from __future__ import annotations

from sidecar.sources.drm.clients import DRM_MAJOR, DrmClient, DrmFdIndex, process_drm_fds, read_drm_clients
from sidecar.sources.drm.fdinfo import DrmFdinfo, EngineCounters, RegionMemory, parse_fdinfo
from sidecar.sources.drm.sampler import DrmClientUse, DrmSample, DrmSampler, EngineUse
from sidecar.sources.drm.users import DrmUser, DrmUsers, DrmUserScan

__all__ = [
    "DRM_MAJOR",
    "DrmClient",
    "DrmClientUse",
    "DrmFdIndex",
    "DrmFdinfo",
    "DrmSample",
    "DrmSampler",
    "DrmUser",
    "DrmUserScan",
    "DrmUsers",
    "EngineCounters",
    "EngineUse",
    "RegionMemory",
    "parse_fdinfo",
    "process_drm_fds",
    "read_drm_clients",
]
