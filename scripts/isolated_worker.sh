#!/usr/bin/env bash
# The interpreter of one pytest-xdist worker (scripts/test.sh passes `--tx popen//python=THIS`):
# `python ARGS` as DSH_WORKER_PYTHON, in its own PID namespace (its own /proc), a private /dev/shm
# and its own loopback. Tests that list every segment in /dev/shm, scan every pid on the machine,
# or bind loopback ports then see only their own worker's, so two workers can run them at once.
# bash stays as the namespace's pid 1, not exec'd away: orphans of detached test jobs are
# re-parented to pid 1, and bash reaps them as init would (a python pid 1 would leave zombies).
# Needs root (scripts/test.sh checks `unshare` works before it uses this).
set -eu
exec unshare --fork --pid --mount-proc --mount --net bash -c '
  mount -t tmpfs -o mode=1777 tmpfs /dev/shm && ip link set lo up || exit 97
  "$@"
  exit $?' worker "${DSH_WORKER_PYTHON:?DSH_WORKER_PYTHON names the python to run}" "$@"
