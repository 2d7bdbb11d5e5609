#!/usr/bin/env bash
# The CUDA path on a machine with an NVIDIA GPU, in one run of about three minutes (killed at 420 s):
# a model on cuda:0 with inputs left on the CPU, allocator figures, the sidecar's verdict with the
# real driver, every efficiency field (clocks, power, PCIe, GPM, MIG) through NvmlSource, and two
# workloads (busy-but-hollow, tensor-heavy) with NVML util beside GPM SM/tensor activity, and the
# edges of a job (scripts/gpu_edges.py: mp.spawn ranks' final state, NVML without libcuda, register
# then compile; scripts/gpu_nvml.py: the batched NVML fields against their getters). Prints a table;
# exits non-zero when a check fails, and at once (FAIL) without a CUDA GPU.
#
#   scripts/gpu_check.sh            # uses python3 (or $PYTHON)
#
# Python packages the image lacks (posix_ipc, flask, waitress) can be carried as wheels in .whl/
# (see docs/gpu-check.md); they are installed into /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv 2>&1 | head -5 || true
exec timeout 420 "$PY" scripts/gpu_check.py "$@"
