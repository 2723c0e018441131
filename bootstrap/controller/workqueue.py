"""The work queue: each key once, however often it is added, with per-key exponential backoff.

As client-go's rate-limited queue: a key added while queued is not queued twice; a key being
processed is marked dirty and queued again when its worker is done, so two workers never
reconcile the same config at once; ``retry`` delays a key by ``base * 2**failures`` (capped),
and ``forget`` resets its count after a success.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Hashable


class WorkQueue:
    def __init__(self, base: float = 1.0, cap: float = 300.0) -> None:
        self.base = base
        self.cap = cap
        self._ready: deque[Hashable] = deque()
        self._queued: set[Hashable] = set()
        self._active: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._later: list[tuple[float, int, Hashable]] = []
        self._failures: dict[Hashable, int] = {}
        self._due: dict[Hashable, float] = {}  # one timer per key: the earliest
        self._seq = 0
        self._cond = threading.Condition()
        self._closed = False

    def add(self, key: Hashable) -> None:
        with self._cond:
            if key in self._active:
                self._dirty.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
                self._cond.notify()

    def add_after(self, key: Hashable, delay: float) -> None:
        """Queue ``key`` in ``delay`` seconds; a key already due sooner keeps its time (one
        timer per key, as client-go's: timers never pile up into parallel chains)."""
        due = time.monotonic() + delay
        with self._cond:
            if key in self._due and self._due[key] <= due:
                return
            self._due[key] = due
            self._seq += 1
            heapq.heappush(self._later, (due, self._seq, key))
            self._cond.notify()

    def retry(self, key: Hashable) -> float:
        """Queue ``key`` again after its backoff; returns the delay chosen."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = float(min(self.cap, self.base * 2.0**failures))
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def get(self, timeout: float = 0.5) -> Hashable | None:
        """The next key to work on (now marked active), or None after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                while self._later and self._later[0][0] <= now:
                    due, _, key = heapq.heappop(self._later)
                    if self._due.get(key) != due:
                        continue  # replaced by an earlier timer
                    del self._due[key]
                    if key in self._active:
                        self._dirty.add(key)
                    elif key not in self._queued:
                        self._queued.add(key)
                        self._ready.append(key)
                if self._ready:
                    key = self._ready.popleft()
                    self._queued.discard(key)
                    self._active.add(key)
                    return key
                wait = deadline - now
                if self._later:
                    wait = min(wait, self._later[0][0] - now)
                if wait <= 0 and now >= deadline:
                    return None
                self._cond.wait(max(wait, 0.01))
            return None

    def done(self, key: Hashable) -> None:
        with self._cond:
            self._active.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                if key not in self._queued:
                    self._queued.add(key)
                    self._ready.append(key)
                    self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._ready) + len(self._due)
