"""One agent: the step machine, the target side and the HTTP server, wired together."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from clavis_contracts import MigrationStep
from clavis_contracts.keys import AgentKey
from clavis_migrator.backend import Backend
from clavis_migrator.config import Config
from clavis_migrator.hooks import HOOK_TIMEOUT_S
from clavis_migrator.incoming import Incoming
from clavis_migrator.peer import PeerClient, PeerError
from clavis_migrator.server import Api, make_server
from clavis_migrator.steps import Machine
from clavis_migrator.store import StepStore

log = logging.getLogger("clavis_migrator.agent")

# room for a chunk's bytes plus a step or a manifest of many files
_BODY_SLACK = 4 * 2**20
# how often the target side looks for images past their step's deadline (Incoming.expire)
EXPIRE_EVERY_S = 2.0


class Agent:
    def __init__(self, cfg: Config, keys: Sequence[AgentKey], backend: Backend) -> None:
        """``keys``: this host's agent keys (clavis_contracts.keys), from its key file."""
        self.cfg = cfg
        state = Path(cfg.state_dir)
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.store = StepStore(state / "steps")

        # the target's restore: the backend's restore and checks, the hook (hooks.py)
        slow = 3 * cfg.backend_timeout_s() + HOOK_TIMEOUT_S
        lease = cfg.restore_lease_s or slow + cfg.peer_timeout_s
        slow = min(slow, lease)  # an answer after the fence time is of no use

        def peer(step: MigrationStep) -> PeerClient:
            if step.peer_key is None or step.peer_key_id is None:
                raise PeerError(f"step {step.step_id} came without its peer key")
            # the server stored the key unwrapped (server.py, POST /api/v1/steps)
            return PeerClient(
                bytes.fromhex(step.peer_key), step.target_address, cfg.peer_timeout_s,
                cfg.max_skew_s, slow, key_id=step.peer_key_id,
            )  # fmt: skip

        self.machine = Machine(
            cfg.host, store=self.store, backend=backend, peer=peer, outgoing=state / "outgoing",
            chunk_bytes=cfg.chunk_bytes, transfer_attempts=cfg.transfer_attempts,
            network_hook=cfg.network_hook, precopy_rounds=cfg.precopy_rounds, lease_s=lease,
            # the target kills an uncommitted copy at most one sweep after its fence time
            fence_margin_s=cfg.max_skew_s + EXPIRE_EVERY_S + 1.0,
        )  # fmt: skip
        self.incoming = Incoming(
            cfg.host, state / "incoming", backend, (cfg.host_cores(), cfg.host_memory()),
            cfg.network_hook,
        )  # fmt: skip
        api = Api(keys, cfg.max_skew_s, self.machine, self.incoming, cfg.chunk_bytes + _BODY_SLACK)
        self.http = make_server(cfg.listen, cfg.port, api)
        self.http_started = api.started
        self._thread = threading.Thread(target=self.http.serve_forever, name="http", daemon=True)
        self._stopping = threading.Event()
        self._sweeper = threading.Thread(target=self._sweep, name="expire", daemon=True)

    @property
    def port(self) -> int:
        return int(self.http.server_address[1])

    def start(self) -> None:
        self._thread.start()
        self.machine.recover()
        self._sweeper.start()

    def _sweep(self) -> None:
        while not self._stopping.wait(EXPIRE_EVERY_S):
            try:
                for step_id in self.incoming.expire():
                    log.warning(
                        "step=%s host=%s images deleted: deadline passed, never restored",
                        step_id, self.cfg.host,
                    )  # fmt: skip
            except OSError as exc:  # keep sweeping: the next pass may see a sane directory
                log.error("host=%s expiring incoming images: %s", self.cfg.host, exc)

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self.http.shutdown()
        self.http.server_close()
        self.machine.join(timeout)
