"""The run ledger (issue 40): every run remembered, one SQLite file per user. See ledger.py."""

from __future__ import annotations

# LedgerBatch, what write() takes, is the recorder's vocabulary (common/runs.py): here for convenience.
from sidecar.common.runs import LedgerBatch
from sidecar.sources.ledger.ledger import Ledger, LedgerFault, Maintained, Retention
from sidecar.sources.ledger.opening import LedgerAccessError, LedgerError, LedgerVersionError
from sidecar.sources.ledger.paths import default_ledger_path, ledger_exists

__all__ = [
    "Ledger",
    "LedgerAccessError",
    "LedgerBatch",
    "LedgerError",
    "LedgerFault",
    "LedgerVersionError",
    "Maintained",
    "Retention",
    "default_ledger_path",
    "ledger_exists",
]
