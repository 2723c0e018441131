"""The work queue: one key once, never two workers on one key, exponential backoff."""

from __future__ import annotations

import time

import pytest

from bootstrap.controller.workqueue import WorkQueue


def test_a_key_added_twice_is_queued_once() -> None:
    q = WorkQueue()
    q.add("a")
    q.add("a")
    q.add("b")
    assert [q.get(0.1), q.get(0.1), q.get(0.1)] == ["a", "b", None]


def test_a_key_added_while_active_comes_back_after_done_not_before() -> None:
    q = WorkQueue()
    q.add("a")
    assert q.get(0.1) == "a"
    q.add("a")  # an event while a worker holds it
    assert q.get(0.1) is None  # no second worker on it
    q.done("a")
    assert q.get(0.1) == "a"


@pytest.mark.parametrize(
    ("failures", "delays"),
    [(1, [0.01]), (3, [0.01, 0.02, 0.04]), (6, [0.01, 0.02, 0.04, 0.08, 0.1, 0.1])],
)
def test_retry_doubles_up_to_the_cap_and_forget_resets(failures: int, delays: list[float]) -> None:
    q = WorkQueue(base=0.01, cap=0.1)
    assert [q.retry("k") for _ in range(failures)] == delays
    q.forget("k")
    assert q.retry("k") == 0.01


def test_add_after_waits_its_delay() -> None:
    q = WorkQueue()
    started = time.monotonic()
    q.add_after("late", 0.2)
    assert q.get(1.0) == "late"
    assert time.monotonic() - started >= 0.18  # not before its delay
