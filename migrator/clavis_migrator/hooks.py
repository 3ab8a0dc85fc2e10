"""The network hook: a site's command that makes the network follow a moved container.

On a flat layer 2 between the hosts nothing is needed beyond the gratuitous ARPs the
backend sends (announce.py). On a routed fabric (a host route per moved container, as an
EVPN or BGP-to-the-host fabric advertises it), the site names a command in
``network_hook``; the agent that has just restored a container runs

    HOOK restored CONTAINER HOST

with HOST this agent's host: on the target after a move (before the step commits; a
failure undoes the move, as the container would be unreachable), and on the source after
a rollback (a failure is reported in the step's message). The command must be idempotent
(``ip route replace``, not ``add``): a rollback may repeat what a move did.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from clavis_migrator.backend import BackendError

HOOK_TIMEOUT_S = 60.0


def run_hook(hook: Sequence[str], container: str, host: str) -> str:
    """Run the hook (nothing when it is empty); what it printed, or BackendError."""
    if not hook:
        return ""
    argv = [*hook, "restored", container, host]
    try:
        cp = subprocess.run(
            argv, capture_output=True, text=True, timeout=HOOK_TIMEOUT_S,
            stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError(f"network hook {hook[0]}: {exc}") from exc
    if cp.returncode != 0:
        raise BackendError(
            f"network hook {' '.join(argv)} exited {cp.returncode}: "
            f"{(cp.stderr or cp.stdout).strip()[-300:]}"
        )
    return cp.stdout.strip()[-200:]
