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


# As IsQualifiedName / IsValidLabelValue: label and taint keys are an optional DNS subdomain
# prefix and a name of at most 63 characters; values are empty or such a name.
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_NAME_RE = re.compile(rf"{_NAME}\Z")
_PREFIX_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\Z")


def is_qualified_name(value: str) -> bool:
    """A label or taint key: ``[prefix/]name``, e.g. ``node-role.kubernetes.io/control-plane``."""
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX_RE.match(prefix)):
        return False
    return len(name) <= 63 and _NAME_RE.match(name) is not None


def is_label_value(value: str) -> bool:
    """A label or taint value: empty, or at most 63 alphanumerics, '-', '_' and '.'."""
    return value == "" or (len(value) <= 63 and _NAME_RE.match(value) is not None)
