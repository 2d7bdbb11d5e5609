"""The keys every document has, from sidecar/documents/contract.py: their one definition (every document
built in tests is also validated against it, DSH_CONTRACT_CHECK=1 in tests/conftest.py).
"""

from __future__ import annotations

from sidecar.documents import contract

STATUS_KEYS = set(contract.STATUS_DOCUMENT.fields)
PROCESS_KEYS = set(contract.PROCESS.fields)
MODEL_KEYS = set(contract.MODEL.fields)
GPU_KEYS = set(contract.GPU.fields)
