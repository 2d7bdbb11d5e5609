#!/usr/bin/env bash
# The GPU path on a machine with an NVIDIA or an AMD GPU, in one run (killed at 420 s). Prints a
# table of PASS/FAIL rows; exits non-zero when a check fails, and at once (FAIL) without the GPU.
#
# NVIDIA (scripts/gpu_check.py, about three minutes): a model on cuda:0 with inputs left on the CPU,
# allocator figures, the sidecar's verdict with the real driver, every efficiency field (clocks,
# power, PCIe, GPM, MIG) through NvmlSource, and two workloads (busy-but-hollow, tensor-heavy) with
# NVML util beside GPM SM/tensor activity, and the edges of a job (scripts/gpu_edges.py: mp.spawn
# ranks' final state, NVML without libcuda, register then compile; scripts/gpu_nvml.py: the batched
# NVML fields against their getters).
#
# AMD (scripts/gpu_check_amd.py, ROCm torch on an MI-series or Radeon card): a job on cuda:0 with
# CPU inputs, then a 2 GiB tensor and training steps; the sidecar's verdict, the AMD card and its
# mapping, and the job's memory within 5 % of amd-smi's (rocm-smi's when amd-smi is missing).
#
#   scripts/gpu_check.sh            # the vendor this machine has (scripts/gpu_vendor.py): NVIDIA
#                                   # when nvidia-smi or /dev/nvidia0 is there, else AMD when /dev/kfd
#                                   # and an amdgpu card are
#   scripts/gpu_check.sh --amd      # or --nvidia, or GPU_CHECK_VENDOR=amd|nvidia: that one's check
#   scripts/gpu_check.sh --detect   # print which it would run, and why; run nothing
#
# Uses python3 (or $PYTHON). Python packages the image lacks (posix_ipc, flask, waitress) can be
# carried as wheels in .whl/ (see docs/gpu-check.md); they are installed into /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENDOR=${GPU_CHECK_VENDOR:-}
DETECT_ONLY=
case "${1:-}" in
  --amd) VENDOR=amd; shift ;;
  --nvidia) VENDOR=nvidia; shift ;;
  --detect) DETECT_ONLY=1; shift ;;
esac
case "$VENDOR" in
  ""|amd|nvidia) ;;
  *) echo "gpu_check.sh: GPU_CHECK_VENDOR=$VENDOR: want amd or nvidia" >&2; exit 2 ;;
esac
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -z "$VENDOR" ] || [ -n "$DETECT_ONLY" ]; then
  FOUND=$("$PY" scripts/gpu_vendor.py) || { echo "gpu_check.sh: scripts/gpu_vendor.py failed" >&2; exit 2; }
  echo "gpu_check.sh: found ${FOUND/$'\t'/: }"
  [ -n "$DETECT_ONLY" ] && exit 0
  VENDOR=${FOUND%%$'\t'*}
  if [ "$VENDOR" = none ]; then
    # As before the AMD path: the NVIDIA check runs and fails at once.
    echo "gpu_check.sh: running the NVIDIA check (it fails at once here); --amd runs the AMD one"
    VENDOR=nvidia
  fi
fi
if [ "$VENDOR" = amd ]; then
  for tool in "amd-smi version" "rocm-smi --showdriverversion"; do
    exe=$(command -v "${tool%% *}" || { [ -x "/opt/rocm/bin/${tool%% *}" ] && echo "/opt/rocm/bin/${tool%% *}"; })
    [ -n "$exe" ] && { "$exe" ${tool#* } 2>&1 | head -4 || true; break; }
  done
  exec timeout 420 "$PY" scripts/gpu_check_amd.py "$@"
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv 2>&1 | head -5 || true
exec timeout 420 "$PY" scripts/gpu_check.py "$@"
