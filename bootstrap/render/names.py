"""Kubernetes object names: one rule for the loader, the resolver and the HTTP paths.

Names end up in messages, file names and the userdata's header comment, so anything that is
not a real Kubernetes name (a newline could write its own cloud-config keys) is refused
wherever it enters. Namespaces are DNS-1123 labels; object names DNS-1123 subdomains (dots
only between labels: ``a..b`` and ``a.`` are not names).
"""

from __future__ import annotations

import re

# As Kubernetes' IsDNS1123Label/IsDNS1123Subdomain: length is checked on the whole value.
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
LABEL_RE = re.compile(rf"{_LABEL}\Z")
SUBDOMAIN_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\Z")


def is_label(value: str) -> bool:
    """A DNS-1123 label (a namespace): at most 63 lower-case alphanumerics and '-'."""
    return len(value) <= 63 and LABEL_RE.match(value) is not None


def is_subdomain(value: str) -> bool:
    """A DNS-1123 subdomain (an object name): labels joined by '.', at most 253."""
    return len(value) <= 253 and SUBDOMAIN_RE.match(value) is not None
