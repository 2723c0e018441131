"""One management and one workload API server for all controller tests (real, ~10 s to start).

Each test works in its own namespace and starts its own controller process(es); a test that
restarts the management API server does it on this shared one and leaves it running.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from controller_harness import ControllerProcess, Testbed

_names = itertools.count()


@pytest.fixture(scope="session")
def testbed(kubernetes_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    bed = Testbed(tmp_path_factory.mktemp("controller"), kubernetes_build / "bin")
    bed.start()
    try:
        yield bed
    finally:
        bed.stop()


@pytest.fixture
def ns(testbed: Testbed) -> str:
    """A fresh namespace for this test."""
    return testbed.namespace(f"t{next(_names)}")


@pytest.fixture
def controller(testbed: Testbed) -> Iterator[ControllerProcess]:
    """One controller replica for this test, stopped (SIGTERM, must exit 0) after it."""
    process = testbed.controller(name=f"c{next(_names)}")
    yield process
    if process.alive():
        assert process.stop() == 0, process.log.read_text()[-2000:]
