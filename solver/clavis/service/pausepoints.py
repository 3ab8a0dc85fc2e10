"""Named pause points for the crash tests, after PostgreSQL's injection points.

With ``CLAVISD_PAUSE_AT=<name>`` in its environment, clavisd logs ``pause point <name>
reached`` when a thread gets there and holds that thread there for good, so a test can
kill -9 the process at exactly that point (solver/tests/service/test_restart.py). Without
the variable, which is how clavisd always runs outside those tests, a point is one string
comparison. The points:

- ``plan-insert``: inside the transaction that stores a new plan, before its commit;
- ``plan-created``: the plan is committed, none of its steps has been dispatched;
- ``step-dispatched``: a step's dispatch is committed, its request not yet sent.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("clavisd.pause")
_AT = os.environ.get("CLAVISD_PAUSE_AT", "")


def pause_point(name: str) -> None:
    if _AT and name == _AT:
        log.warning("pause point %s reached; held until the process is killed", name)
        threading.Event().wait()
