"""Fixtures for the testbed integration tests.

`testbed` brings the emulated cluster up once per session and always brings it down
at the end, also when a test fails. The lifecycle tests (which build and remove
testbeds of their own) are moved before every test that uses the shared one.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from . import tb

IDLE_DEADLINE_S = 30.0


# The testbed tests build and remove a whole cluster on this machine, so they run only
# when asked: deploy/testbed/testbed.mk exports this for `make test`, after installing
# the packages they need.
ENABLE = "CLAVIS_TESTBED_TESTS"


LOCK = "/run/lock/clavis-testbed-tests.lock"
LOCK_WAIT_S = 1200.0
_lock_fd: list[int] = []


def pytest_configure(config: pytest.Config) -> None:
    """One testbed per machine: a second test session (another `make test` on the same
    machine) waits here, bounded, instead of tearing down the first one's cluster."""
    if os.environ.get(ENABLE) != "1" or _lock_fd:
        return
    os.makedirs(os.path.dirname(LOCK), exist_ok=True)
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise pytest.UsageError(f"another testbed test session holds {LOCK}") from None
            time.sleep(1.0)
    _lock_fd.append(fd)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get(ENABLE) != "1":
        skip = pytest.mark.skip(reason=f"testbed tests run with {ENABLE}=1 (make test sets it)")
        for it in items:
            if it.get_closest_marker("integration") is not None:
                it.add_marker(skip)

    # lifecycle tests need the machine without a testbed: run them first; the stack's
    # tests add the Clavis stack to the shared testbed and end by taking it down: last
    def order(it: pytest.Item) -> int:
        module = getattr(getattr(it, "module", None), "__name__", "")
        if "lifecycle" in module:
            return 0
        # the demo's scenario takes down whatever is up and brings up a fresh stack
        # and so does the power saving test (test_power)
        fresh = module.endswith(("test_demo", "test_power"))
        return 3 if fresh else 2 if module.endswith("test_stack") else 1

    items.sort(key=order)


@pytest.fixture(scope="session")
def testbed() -> Iterator[dict[str, Any]]:
    if not tb.is_root():
        pytest.skip("the testbed needs root (namespaces, LXC, iptables)")
    t0 = time.monotonic()
    cp = tb.tb("up", check=False)
    try:
        assert cp.returncode == 0, f"clavis-testbed up failed:\n{cp.stderr}"
        st = tb.status()
        names = [c["name"] for h in st["hosts"] for c in h["containers"]]
        deadline = t0 + IDLE_DEADLINE_S
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            out = tb.slurm(["sinfo", "-N", "-h", "-o", "%N %T"])
            states = dict(line.split() for line in out.splitlines() if line.strip())
            if all(states.get(n) == "idle" for n in names):
                break
            time.sleep(0.3)
        st["idle_after_s"] = time.monotonic() - t0
        st["idle_states"] = states
        # the table `up` printed, for test_table.py
        st["up_stdout"] = cp.stdout
        yield st
    finally:
        down = tb.tb("down", check=False)
        assert down.returncode == 0, f"clavis-testbed down failed:\n{down.stderr}"
