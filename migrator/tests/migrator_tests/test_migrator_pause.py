"""Pause points' settings: a point, a bounded hold, and what is not a hold."""

from __future__ import annotations

import time

import pytest

from clavis_migrator.pause import PAUSE_ENV, PAUSE_HOLD_S, hold_for, pause_point


def test_a_point_alone_holds_until_killed_and_a_number_bounds_it() -> None:
    assert hold_for("target-receiving", "target-receiving") == PAUSE_HOLD_S
    assert hold_for("target-receiving:2.5", "target-receiving") == 2.5
    assert hold_for("target-receiving:0", "target-receiving") == 0.0


@pytest.mark.parametrize(
    "setting", ["after-checkpoint", "after-checkpoint:3", "target-receiving:x",
                "target-receiving:-1", "target-receiving:1e9", "", "target"]
)  # fmt: skip
def test_another_point_or_a_bad_hold_does_not_hold(setting: str) -> None:
    assert hold_for(setting, "target-receiving") is None


def test_a_bounded_hold_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PAUSE_ENV, "after-checkpoint:0.2")
    t0 = time.monotonic()
    pause_point("after-checkpoint")
    assert 0.2 <= time.monotonic() - t0 < 5
    t0 = time.monotonic()
    pause_point("target-receiving")
    assert time.monotonic() - t0 < 0.1
