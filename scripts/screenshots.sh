#!/usr/bin/env bash
# Refresh the documentation's screenshots (docs/screenshots/*.png) from the browser tests.
#   ./scripts/screenshots.sh              # the page and the DSH plugin (DSH via scripts/install_dsh.sh)
#   ./scripts/screenshots.sh page         # only the standalone page (page-*.png)
#   ./scripts/screenshots.sh cluster      # the two-node job of tests/integration/test_cluster.py (needs Prometheus)
#   ./scripts/screenshots.sh vendors      # AMD and Intel cards on the page and in DSH (page-amd.png, dsh-laptop.png, ...)
#   PYTHON=/path/to/python ./scripts/screenshots.sh
# The tests themselves write screenshots to a temporary folder; only this script points them at
# docs/screenshots (through DSH_SCREENSHOTS_DIR). Needs what scripts/test.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-.venv/bin/python}
OUT=docs/screenshots
# The page's states beyond test_page.py's: without its token, a job of one process with --prometheus,
# an AMD machine's and a laptop's cards (their fixture /proc makes DRM device nodes: mknod as root).
page_more=(tests/browser/test_token_page.py tests/browser/test_runs_page.py
  tests/browser/test_cluster_page.py::test_a_job_of_one_process_gets_one_line_not_a_table_per_job
  tests/browser/test_vendor_page.py)
# The DSH plugin's beyond test_dsh_plugin.py's: the sidecar it starts itself, a session's day of runs,
# the AMD machine's and the laptop's cards.
dsh_more=(tests/browser/test_dsh_autostart.py
  tests/browser/test_dsh_workspace.py::test_the_live_job_comes_first_and_the_chip_counts_live_jobs
  tests/browser/test_dsh_vendor.py)
case "${1:-all}" in
  page) tests=(tests/browser/test_page.py "${page_more[@]}") ;;
  dsh) tests=(tests/browser/test_dsh_plugin.py "${dsh_more[@]}") ;;
  cluster) tests=(tests/integration/test_cluster.py) ;;
  vendors) tests=(tests/browser/test_vendor_page.py tests/browser/test_dsh_vendor.py) ;;
  all) tests=(tests/browser/test_page.py "${page_more[@]}" tests/browser/test_dsh_plugin.py "${dsh_more[@]}" tests/integration/test_cluster.py) ;;
  *) echo "screenshots.sh: unknown set '$1' (page, dsh, cluster, vendors or all)" >&2; exit 2 ;;
esac

mkdir -p "$OUT"
stamp=$(mktemp)
trap 'rm -f "$stamp"' EXIT
# A skipped test would leave an old picture in place: fail instead (DSH_REQUIRE_ALL).
DSH_SCREENSHOTS_DIR="$PWD/$OUT" DSH_REQUIRE_ALL=1 "$PY" -m pytest -q -p no:cacheprovider "${tests[@]}"

fresh=$(find "$OUT" -name '*.png' -newer "$stamp" | sort)
if [ -z "$fresh" ]; then
  echo "screenshots.sh: no screenshot was written to $OUT" >&2
  exit 1
fi
echo "screenshots.sh: wrote $(echo "$fresh" | wc -l) screenshots:"
echo "$fresh"
