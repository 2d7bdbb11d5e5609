"""Where the sidecar's facts come from: the process tree, probe segments, NVML and /sys."""
