#!/usr/bin/env bash
# Install everything the tests need (Debian, Python and npm packages) and run the whole suite.
#   ./scripts/test.sh                 # everything
#   ./scripts/test.sh tests/unit -x   # arguments go to pytest (to both phases)
#   HYPOTHESIS_PROFILE=thorough ./scripts/test.sh   # every property test at its full example count
# Needs root or sudo for apt-get the first time (chromium, prometheus, gcc, npm).
#
# Two phases: the tests not marked `alone` on pytest-xdist workers (one more than cores, at least 2), a
# test file on one worker (--dist loadfile: module fixtures and file order hold), the files with
# `slow` tests handed out first (tests/helpers/dispatch_order.py); then
# the `alone` ones (timing, cadence and load bounds that need the machine free of the first phase's
# load), four at a time. As root each worker runs in its own PID namespace, /dev/shm and loopback
# (scripts/isolated_worker.sh); without that, the `machine_wide` tests (they see every segment in
# /dev/shm or every pid) run in the serial phase too.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'test.sh: %s\n' "$*" >&2; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# --- Debian packages -------------------------------------------------------------------------
apt_want=()
[ -x /usr/bin/chromium ] || apt_want+=(chromium)
command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ] || apt_want+=(prometheus)
command -v gcc >/dev/null 2>&1 || apt_want+=(gcc libc6-dev)
command -v npm >/dev/null 2>&1 || apt_want+=(npm)
command -v flock >/dev/null 2>&1 || apt_want+=(util-linux)
command -v ip >/dev/null 2>&1 || apt_want+=(iproute2)  # scripts/isolated_worker.sh: the worker's loopback
# Chinese glyphs for the zh page (tests/browser/test_cjk_font.py): without a CJK font Chromium draws boxes.
# WenQuanYi Micro Hei: 5 MB installed (Noto CJK is 90 MB).
[ -n "$(fc-list :lang=zh 2>/dev/null)" ] || apt_want+=(fonts-wqy-microhei)
if [ ${#apt_want[@]} -gt 0 ]; then
  log "installing Debian packages: ${apt_want[*]}"
  $SUDO apt-get update -q >/dev/null
  # policy-rc.d keeps the prometheus package from starting a system service we do not use.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $SUDO apt-get install -y -q --no-install-recommends "${apt_want[@]}" >/dev/null
fi

# --- Python ----------------------------------------------------------------------------------
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# torch first: lightning and accelerate in the test extras depend on torch, and pip would otherwise
# resolve that with whatever torch build the index offers (a multi-GiB CUDA one) before ours.
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  log "installing torch 2.13.0 (CPU build where a local wheel exists)"
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -e ".[test]"

# --- DSH (Node 22, pnpm, DSH 0.1.0-rc.8) for the plugin's browser tests ------------------------
if DSH_BIN=$(bash scripts/install_dsh.sh | tail -n 1) && [ -x "$DSH_BIN" ]; then
  export DSH_BIN
else
  log "DSH could not be installed: the DSH plugin tests will say so and fail"
  unset DSH_BIN
fi
if [ -f dsh_plugin/package.json ] && [ ! -d dsh_plugin/node_modules ]; then
  (cd dsh_plugin && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || log "npm ci in dsh_plugin failed"
fi

# --- lint, then the suite ----------------------------------------------------------------------
# Bytecode: the suite starts hundreds of Python processes (sidecars, jobs, pytest workers) that
# import this tree; compiled once here, none of them compiles it again. PYTHONDONTWRITEBYTECODE
# (set by some images) would make every one of them compile from source, and every pytest worker
# rewrite every test module's asserts anew.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m compileall -q -j 0 hostfs probe probe_wire sidecar tests benchmarks scripts >/dev/null
log "ruff"
.venv/bin/ruff check hostfs probe probe_wire sidecar tests scripts benchmarks
log "pytest"
export DSH_REQUIRE_ALL=1
# One worker more than cores: the tests wait on jobs and browsers a fifth of the time, which a
# worker per core leaves idle. DSH_TEST_WORKERS=N sets the count.
workers=${DSH_TEST_WORKERS:-$(( $(nproc) + 1 ))}
[ "$workers" -ge 2 ] || workers=2
[ "$workers" -le 8 ] || workers=8
if [ "$(id -u)" -eq 0 ] && unshare --fork --pid --mount-proc --mount --net true >/dev/null 2>&1; then
  export DSH_WORKER_PYTHON="$PWD/.venv/bin/python"
  parallel=(--tx "${workers}*popen//python=$PWD/scripts/isolated_worker.sh")
  # DSH's tests (marker dsh) boot DSH and its plugin's own sidecar, which looks for the test's jobs
  # machine-wide: a worker's namespaces hold exactly that worker's jobs, so they run there too.
  parallel_mark="not alone"
  serial_mark="alone"
  # The `alone` tests mostly wait (trickling connections, a 10 s cadence window): four at a time on
  # 2 cores they keep their bounds with the same margin as one at a time (cadence within 0.03 % of
  # its 10 % bound, a new client served in under 75 ms of its 2 s bound), in half the time.
  serial=(--tx "4*popen//python=$PWD/scripts/isolated_worker.sh" --dist load)
else
  log "no PID, mount and network namespaces here: the machine_wide tests run in the serial phase"
  parallel=(-n "$workers")
  parallel_mark="not alone and not machine_wide and not dsh"
  serial_mark="alone or machine_wide or dsh"
  serial=()  # machine_wide tests need the machine to themselves here: one at a time
fi
# The first phase's workers write the node ids of the `alone` tests they collected here
# (tests/conftest.py): the second phase then collects only their files.
alone_ids=$(mktemp)
trap 'rm -f "$alone_ids"' EXIT
started=$(date +%s)
set +e
DSH_ALONE_IDS_FILE=$alone_ids .venv/bin/python -m pytest --durations=30 "${parallel[@]}" --dist loadfile \
  --no-loadscope-reorder -m "$parallel_mark" "$@"
rc1=$?
parallel_s=$(( $(date +%s) - started ))
serial_tests=()
if [ "$serial_mark" = "alone" ] && [ $# -eq 0 ] && [ -s "$alone_ids" ]; then
  mapfile -t serial_tests < "$alone_ids"
fi
.venv/bin/python -m pytest --durations=30 ${serial[@]+"${serial[@]}"} -m "$serial_mark" "$@" \
  ${serial_tests[@]+"${serial_tests[@]}"}
rc2=$?
set -e
total_s=$(( $(date +%s) - started ))
log "parallel phase ($workers workers): exit $rc1 in ${parallel_s} s; serial phase: exit $rc2 in $(( total_s - parallel_s )) s"
log "suite took ${total_s} s"
# pytest's 5 is "collected nothing": one phase may have nothing to run (`./scripts/test.sh tests/unit`),
# not both.
if [ $rc1 -eq 5 ] && [ $rc2 -eq 5 ]; then
  log "pytest collected no tests"
  exit 1
fi
[ $rc1 -eq 0 ] || [ $rc1 -eq 5 ] || exit $rc1
[ $rc2 -eq 0 ] || [ $rc2 -eq 5 ] || exit $rc2
exit 0
