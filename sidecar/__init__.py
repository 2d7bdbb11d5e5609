"""dsh-gpu-dashboard sidecar: watches a training job's process tree, its probe segments and the
NVIDIA driver, and serves one verdict: is the model running on the GPU, and if not, why."""

__version__ = "0.1.0"
