"""The migrator-protocol recorder stays a test tool: nothing outside the tests uses it, it
runs only under pytest, and every answer it gives says that nothing was moved."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .protocol_recorder import NOTHING_MOVED, ProtocolRecorder

ROOT = Path(__file__).resolve().parents[3]
NAMES = ("protocol_recorder", "ProtocolRecorder", "agent_double", "AgentDouble")


def test_nothing_outside_the_tests_imports_it() -> None:
    tests = ROOT / "solver" / "tests"
    users = [
        p.relative_to(ROOT)
        for p in ROOT.rglob("*.py")
        if ".venv" not in p.parts and tests not in p.parents
        and any(n in p.read_text(errors="replace") for n in NAMES)
    ]  # fmt: skip
    assert users == []


def test_it_refuses_to_start_outside_pytest() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    code = (
        "from solver.tests.service.protocol_recorder import ProtocolRecorder; ProtocolRecorder(1)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=60, check=False)  # fmt: skip
    assert r.returncode != 0 and "only inside a pytest test" in r.stderr


def test_its_answers_say_nothing_was_moved() -> None:
    with ProtocolRecorder(delay_s=0) as rec:
        assert rec.server.server_address[0] == "127.0.0.1"
        rec.record.accepted["1:0"] = 0.0
        status = rec.status("1:0")
    assert status.state == "done" and status.message == NOTHING_MOVED
