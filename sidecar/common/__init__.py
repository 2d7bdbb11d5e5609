"""Vocabulary several layers share and that imports no other sidecar module: the message catalogue,
the NVML field and reason names, the per-poll memo. The lowest layer: it imports none above it."""
