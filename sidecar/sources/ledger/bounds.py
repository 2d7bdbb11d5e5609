"""The ledger's limits and retention, in one place: how long runs and minutes are kept, how big the
file may grow, and how much of any stored value is read back (the file is input too: a tampered or
foreign row must not cost more than these).

A day of 1,000 short jobs an hour (each a few minutes with a verdict change or two) measures at
LEDGER_DAY_BYTES_MAX or less (`benchmarks/ledger_size.py` prints the figure; the test asserts it).
"""

from __future__ import annotations

# Where the file is (sidecar/sources/ledger/paths.py).
APP_FOLDER = "dsh-gpu-dashboard"
LEDGER_FILE = "runs.sqlite3"
ROOT_FOLDER = "/var/lib/dsh-gpu-dashboard"  # root's ledger (uid 0): a system daemon's state
XDG_STATE_DEFAULT = ".local/state"  # under the home, when XDG_STATE_HOME is unset or not absolute

# How long a write waits for another sidecar's write to the same file (discovery and `dsh-sidecar
# run` may both watch one job) before it gives up and the batch is dropped (a fault, never a raise).
BUSY_TIMEOUT_S = 5.0

# Retention (Ledger.maintain): runs not seen for RUN_RETENTION_S are deleted with their minutes and
# verdict changes; minute rows older than MINUTE_RETENTION_S are merged into rows of
# DOWNSAMPLED_SPAN_S (an hour), so a run's last week is kept by the minute and the rest by the hour.
RUN_RETENTION_S = 90 * 86_400.0
MINUTE_RETENTION_S = 7 * 86_400.0
DOWNSAMPLED_SPAN_S = 3_600.0
# The file's size: past SIZE_CAP_BYTES of used pages, maintain() deletes the runs seen longest ago
# until it is under; HARD_CAP_BYTES is SQLite's own max_page_count, so a runaway between two
# maintain() calls fails its writes (SQLITE_FULL, a fault) rather than fill the disk.
SIZE_CAP_BYTES = 256 << 20
HARD_CAP_BYTES = 2 * SIZE_CAP_BYTES
# The WAL file is truncated to this after a checkpoint (SQLite reuses it, never shrinks it otherwise).
WAL_LIMIT_BYTES = 4 << 20
# Rows maintain() deletes or merges in one transaction: another writer waits at most one such step.
MAINTAIN_CHUNK_ROWS = 2_000

# What one value may hold, on the way in and on the way back out.
MAX_TEXT_CHARS = 4_096  # a string (a path, an argument of the command line, a host name)
MAX_LIST_ITEMS = 256  # items of a stored tuple (the command's arguments, warnings, GPU models)
MAX_JSON_CHARS = 65_536  # a stored tuple's JSON text: a longer one is not read back
# What one read hands back.
MAX_LISTED_RUNS = 10_000  # runs(): the most rows one call returns
MAX_TIMELINE = 2_000  # detail(): the newest verdict changes of a run
MAX_DETAIL_MINUTES = 20_000  # detail(): the newest minute rows (a week of minutes and 90 days of hours fit)

# The figure benchmarks/ledger_size.py measures and tests/unit/test_ledger_retention.py asserts.
LEDGER_DAY_BYTES_MAX = 48 << 20  # measured: 44.0 MiB (46,092,288 B) for 24,000 jobs, 1,921 B a job
