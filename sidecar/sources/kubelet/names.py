"""The shapes of Kubernetes names, checked wherever one comes from outside the sidecar (a kubelet,
a process's environment or files): anything else is not taken."""

from __future__ import annotations

import re

# A namespace and a container's name are DNS-1123 labels; a pod's name is a DNS-1123 subdomain.
MAX_LABEL_NAME_CHARS = 63
MAX_SUBDOMAIN_NAME_CHARS = 253
_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def label_name(value: object) -> str | None:
    """``value`` when it is a DNS-1123 label (a namespace, a container's name), else None."""
    return value if isinstance(value, str) and _LABEL_RE.match(value) else None


def subdomain_name(value: object) -> str | None:
    """``value`` when it is a DNS-1123 subdomain (a pod's name), else None."""
    return value if isinstance(value, str) and _SUBDOMAIN_RE.match(value) else None
