"""Parsed YAML documents kept by their text, for ``nodesmith serve``.

A machine controller sends one bundle per Machine, and every bundle of a cluster repeats the
same Cluster and CA Secret documents byte for byte (and a retry repeats all of them). Parsing
YAML is the largest single cost of a request, so a worker keeps what it parsed, keyed by the
document's exact text, and parses only the documents it has not seen.

The cached values are shared between requests: nothing downstream may modify the parsed
objects (``tests/test_doccache.py`` renders every golden bundle and checks they are unchanged).
Bounded (see ``DocumentCache``), least recently used first out.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

import yaml

from bootstrap.render import yamlio

# A line starting with "---" (then a blank or the line end) starts a document, even inside a
# block scalar (YAML forbids such content lines), so a stream can be cut before each of them.
_DOCUMENT_START = re.compile(r"^(?=---(?:[ \t\r]|$))", re.MULTILINE)

Parsed = tuple[list[Any], int | None]  # yamlio.load_all_counted's answer


class DocumentCache:
    """Kept: at most ``max_entries`` documents and ``max_chars`` characters of their text.

    Small on purpose: parsed objects are some 15 times the size of their text and every one
    of them is a container the cyclic GC scans, so a large cache turns into GC pauses (a
    4 MiB bound made the p99 of distinct bundles worse, not better). A few hundred entries
    hold the Cluster and CA Secret documents of many clusters and a controller's retries.
    """

    def __init__(
        self, max_entries: int = 512, max_chars: int = 1 << 20, max_entry: int = 64 << 10
    ) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.max_entry = max_entry
        self._entries: OrderedDict[str, Parsed] = OrderedDict()
        self._chars = 0
        self.hits = 0
        self.misses = 0

    def _parse(self, chunk: str) -> Parsed:
        found = self._entries.get(chunk)
        if found is not None:
            self._entries.move_to_end(chunk)
            self.hits += 1
            return found
        self.misses += 1
        parsed = yamlio.load_all_counted(chunk)
        if len(chunk) <= self.max_entry:
            self._entries[chunk] = parsed
            self._chars += len(chunk)
            while self._chars > self.max_chars or len(self._entries) > self.max_entries:
                old, _ = self._entries.popitem(last=False)
                self._chars -= len(old)
        return parsed

    def load_all_counted(self, text: str) -> Parsed:
        """What ``yamlio.load_all_counted(text)`` returns, or raises, with cached documents.

        Any failure in a piece re-parses the whole text, so errors (and their line numbers)
        are exactly those of an uncached parse, and so is anything the cut cannot express
        (a ``%YAML`` directive before its ``---``).
        """
        docs: list[Any] = []
        values: int | None = 0
        try:
            for chunk in _DOCUMENT_START.split(text):
                part, count = self._parse(chunk)
                docs.extend(part)
                values = None if values is None or count is None else values + count
        except (yaml.YAMLError, RecursionError, ValueError):
            # Only parse errors: anything else (the CPU budget's BudgetExceeded) goes up as is.
            return yamlio.load_all_counted(text)
        return docs, values
