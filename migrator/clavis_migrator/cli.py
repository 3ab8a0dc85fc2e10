"""``clavis-migrator [--config FILE]``: serve migration steps until SIGTERM/SIGINT.

Runs as root on every host (CRIU needs it). The config file holds everything
(docs/migrator.md); ``--check-config`` validates it and exits.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from clavis_contracts.keys import KeyFileError, load_keys, own_key
from clavis_migrator.agent import Agent
from clavis_migrator.backend import Backend
from clavis_migrator.config import Config, ConfigError, load
from clavis_migrator.lxc import LxcBackend
from clavis_migrator.lxd import LxdBackend

log = logging.getLogger("clavis_migrator")


def make_backend(cfg: Config) -> Backend:
    """The backend the config's ``backend`` names (config.BACKENDS)."""
    state = Path(cfg.state_dir)
    if cfg.backend == "lxd":
        return LxdBackend(cfg.lxd, cfg.host, state)
    return LxcBackend(cfg.lxc, state)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="clavis-migrator", description=__doc__)
    p.add_argument("--config", type=Path, default=None, help="TOML config (default: built-in)")
    p.add_argument("--check-config", action="store_true", help="validate the config and exit")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        cfg = load(args.config)
    except ConfigError as exc:
        print(f"clavis-migrator: bad config: {exc}", file=sys.stderr)
        return 2
    if args.check_config:
        print("config ok")
        return 0
    try:
        own_key(Path(cfg.key_file), cfg.host)  # the first key must be this host's
        keys = load_keys(Path(cfg.key_file))
        agent = Agent(cfg, keys, make_backend(cfg))
    except (KeyFileError, OSError, ValueError) as exc:
        print(f"clavis-migrator: cannot start: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    agent.start()
    log.info("host=%s listening on %s:%d", cfg.host, cfg.listen, agent.port)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
