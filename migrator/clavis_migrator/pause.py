"""Pause points: fault injection for the testbed's tests, after clavisd's.

With ``CLAVIS_MIGRATOR_PAUSE_AT=POINT`` in its environment the agent logs ``pause point
POINT reached`` there and holds that thread (the test then kills the agent by PID):

- ``after-checkpoint``: on the source, once the container is dumped;
- ``target-receiving``: on the target, when the first chunk of a step's images arrives;
- ``target-restored``: on the target, once a container is restored and verified, before
  the answer goes back to the source (a link cut there is fencing's case).

``POINT:SECONDS`` holds the thread that long only, then goes on: a test can act on the
world (cut a link) while a step is known to be at that point, without killing the agent.
Without the variable a point is one dictionary lookup.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Final

log = logging.getLogger("clavis_migrator.pause")

PAUSE_ENV: Final = "CLAVIS_MIGRATOR_PAUSE_AT"
PAUSE_HOLD_S: Final = 3600.0


def hold_for(setting: str, name: str) -> float | None:
    """How long ``setting`` (the variable's value) holds point ``name``; None: not at all.

    A hold that is not a non-negative number of seconds is ignored with the point (a
    typo in a test must not turn into an hour's hang)."""
    point, _, seconds = setting.partition(":")
    if point != name:
        return None
    if not seconds:
        return PAUSE_HOLD_S
    try:
        hold = float(seconds)
    except ValueError:
        return None
    return hold if 0.0 <= hold <= PAUSE_HOLD_S else None


def pause_point(name: str) -> None:
    setting = os.environ.get(PAUSE_ENV)
    if setting is None:
        return
    hold = hold_for(setting, name)
    if hold is not None:
        log.warning("pause point %s reached", name)
        threading.Event().wait(hold)
