"""Pause points: fault injection for the testbed's tests, after clavisd's.

With ``CLAVIS_MIGRATOR_PAUSE_AT=POINT`` in its environment the agent logs ``pause point
POINT reached`` there and holds that thread (the test then kills the agent by PID):

- ``after-checkpoint``: on the source, once the container is dumped;
- ``target-receiving``: on the target, when the first chunk of a step's images arrives.

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


def pause_point(name: str) -> None:
    if os.environ.get(PAUSE_ENV) == name:
        log.warning("pause point %s reached", name)
        threading.Event().wait(PAUSE_HOLD_S)
