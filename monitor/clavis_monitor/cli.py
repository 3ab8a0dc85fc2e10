"""``clavis-monitor [--config FILE]``: run the agent until SIGTERM/SIGINT.

Exporter-style flags; the config file holds everything else (docs/monitor.md). On exit
the agent removes its accounting tables and its socket, so nothing of it stays.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from clavis_contracts.keys import KeyFileError, own_key
from clavis_monitor.agent import Agent
from clavis_monitor.config import ConfigError, load
from clavis_monitor.metrics import serve
from clavis_monitor.perf import RecordedCounters
from clavis_monitor.registry import RegistrationServer
from clavis_monitor.sender import Sender, Spool

log = logging.getLogger("clavis_monitor")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="clavis-monitor", description=__doc__)
    p.add_argument(
        "--config", type=Path, default=None, help="TOML config (default: built-in defaults)"
    )
    p.add_argument("--check-config", action="store_true", help="validate the config and exit")
    p.add_argument(
        "--recorded-counters",
        type=Path,
        default=None,
        help="replay recorded perf counters (JSON lines) instead of reading the PMU",
    )
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        cfg = load(args.config)
    except ConfigError as exc:
        print(f"clavis-monitor: bad config: {exc}", file=sys.stderr)
        return 2
    if args.check_config:
        print("config ok")
        return 0
    try:
        key = own_key(Path(cfg.clavisd.key_file), cfg.host)
        counters = (
            RecordedCounters.from_file(args.recorded_counters) if args.recorded_counters else None
        )
        sender = Sender(cfg.clavisd, Spool(cfg.spool), key)
        agent = Agent(cfg, sender, counters=counters, recorded=counters is not None)
        server = RegistrationServer(
            Path(cfg.registration.socket), agent.registry, cfg.registration.request_timeout_s
        )
    except (KeyFileError, OSError, ValueError) as exc:
        print(f"clavis-monitor: cannot start: {exc}", file=sys.stderr)
        return 1
    try:
        http = (
            serve(cfg.metrics.listen, cfg.metrics.port, agent.metrics) if cfg.metrics.port else None
        )
    except OSError as exc:
        server.close()
        print(
            f"clavis-monitor: cannot start: /metrics on {cfg.metrics.listen}:{cfg.metrics.port}: "
            f"{exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    agent.start()
    log.info("host=%s started: perf=%s", cfg.host, agent.perf_state)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.close()
        if http is not None:
            http.shutdown()
        agent.stop()
        log.info("host=%s stopped; accounting tables removed", cfg.host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
