#!/usr/bin/env bash
# Install the project into .venv and run the demo: a real training job watched by the sidecar.
# Open the URL it prints. Ctrl-C stops both.  PORT=9000 ./scripts/demo.sh  picks another port.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -e .
# torch is not a dependency of the project (yours is kept); the demo needs one.
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  echo "demo: installing torch into .venv (once)"
  .venv/bin/python -m pip install -q "torch==2.13.0" numpy
fi
exec .venv/bin/dsh-sidecar run --port "${PORT:-8765}" --grace 30 -- .venv/bin/python scripts/demo_train.py "$@"
