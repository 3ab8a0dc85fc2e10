"""Simulated hosts running the real monitor's delivery path (clavis_monitor.sender: its
disk spool, retry and backoff, each request signed with the host's own key when sent)
against a real clavisd that is stopped for an outage, or killed with SIGKILL under load;
then every report generated, acknowledged (2xx) and stored is counted."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from chaos.clavisd import Clavisd, container, host_key, host_name, report_doc

from clavis_contracts.keys import AgentKey
from clavis_monitor.config import ClavisdConfig, SpoolConfig
from clavis_monitor.sender import Sender, Spool


class CountingSender(Sender):
    """The monitor's Sender, noting the timestamp of every report clavisd acknowledged."""

    def __init__(self, cfg: ClavisdConfig, spool: Spool, key: AgentKey) -> None:
        super().__init__(cfg, spool, key)
        self.acked: list[float] = []
        self.statuses: dict[int, int] = {}

    def _post(self, body: bytes) -> int | None:
        status = super()._post(body)
        if status is not None:
            self.statuses[status] = self.statuses.get(status, 0) + 1
        if status is not None and 200 <= status < 300:
            ts = json.loads(body)["timestamp"]
            self.acked.append(_key_of(ts))
        return status


def _key_of(iso: str) -> float:
    return round(datetime.fromisoformat(iso).timestamp(), 3)


@dataclass
class SimHost:
    """One host: a report every ``interval_s`` handed to the monitor's Sender."""

    index: int
    sender: CountingSender
    interval_s: float
    generated: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def run(self, limit: int) -> None:
        name = host_name(self.index)
        t0 = time.time()
        for k in range(limit):  # bounded in count; the stop event ends it sooner
            due = t0 + k * self.interval_s
            if self.stop.wait(max(0.0, due - time.time())):
                return
            ts = round(due, 3)
            body = json.dumps(report_doc(name, [container(f"{name}-c0", job=f"j{self.index}"),
                                                container(f"{name}-c1", job=f"j{self.index}")],
                                         ts)).encode()  # fmt: skip
            self.generated.append(ts)
            self.sender.submit(body)


class Fleet:
    """N simulated hosts, each with its own spool directory under ``home``."""

    def __init__(self, home: Path, d: Clavisd, hosts: int, interval_s: float,
                 max_reports: int) -> None:  # fmt: skip
        self.hosts: list[SimHost] = []
        for i in range(1, hosts + 1):
            spool = Spool(SpoolConfig(dir=str(home / host_name(i)), max_reports=20000))
            cfg = ClavisdConfig(url=d.url, timeout_s=5.0, backoff_min_s=1.0, backoff_max_s=60.0)
            self.hosts.append(SimHost(i, CountingSender(cfg, spool, host_key(i)), interval_s))
        self.max_reports = max_reports

    def start(self) -> None:
        for h in self.hosts:
            h.sender.start()
            h.thread = threading.Thread(target=h.run, args=(self.max_reports,), daemon=True)
            h.thread.start()

    def spooled(self) -> int:
        return sum(len(h.sender.spool) for h in self.hosts)

    def wait_drained(self, limit_s: float) -> float:
        """Seconds until every spool is empty (or ``limit_s``)."""
        t0 = time.monotonic()
        while self.spooled() and time.monotonic() - t0 < limit_s:
            time.sleep(0.5)
        return time.monotonic() - t0

    def stop(self, drain_s: float) -> float:
        for h in self.hosts:
            h.stop.set()
        for h in self.hosts:
            if h.thread is not None:
                h.thread.join(timeout=30)
        took = self.wait_drained(drain_s)
        for h in self.hosts:
            h.sender.stop()
        return took

    def count(self, d: Clavisd) -> dict[str, Any]:
        stored: dict[str, set[float]] = {}
        for host, ts in d.query("select host, ts from host_samples"):
            stored.setdefault(host, set()).add(round(ts, 3))
        gen = acked = lost_gen = lost_acked = 0
        for h in self.hosts:
            have = stored.get(host_name(h.index), set())
            gen += len(h.generated)
            acked += len(h.sender.acked)
            lost_gen += len(set(h.generated) - have)
            lost_acked += len(set(h.sender.acked) - have)
        return {
            "generated": gen, "acknowledged": acked,
            "stored": sum(len(v) for v in stored.values()),
            "lost": lost_gen, "lost_acknowledged": lost_acked,
            "refused_by_clavisd": sum(h.sender.stats.rejected for h in self.hosts),
            "retries": sum(h.sender.stats.failures for h in self.hosts),
            "spool_dropped": sum(h.sender.spool.dropped for h in self.hosts),
            "spool_left": self.spooled(),
            "statuses": _merged([h.sender.statuses for h in self.hosts]),
        }  # fmt: skip


def _merged(counts: list[dict[int, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for status, n in c.items():
            out[str(status)] = out.get(str(status), 0) + n
    return dict(sorted(out.items()))


def outage(home: Path, hosts: int, outage_s: float, interval_s: float,
           log: Callable[[str], None]) -> dict[str, Any]:  # fmt: skip
    """clavisd up, stopped (SIGTERM) for ``outage_s``, started again; every sample counted."""
    (home / "clavisd").mkdir()
    d = Clavisd(home / "clavisd", hosts, extra=f'[advice]\npath = "{home / "advice.json"}"\n'
                "[repack]\ninterval_s = 0\n")  # fmt: skip
    d.start()
    warm_s, after_s = 10.0, 10.0
    limit = int((warm_s + outage_s + after_s + 3600) / interval_s)
    fleet = Fleet(home / "spools", d, hosts, interval_s, limit)
    fleet.start()
    try:
        time.sleep(warm_s)
        d.stop()
        down = time.monotonic()
        log(f"outage: clavisd stopped (SIGTERM) for {outage_s:.0f} s")
        while (left := outage_s - (time.monotonic() - down)) > 0:
            time.sleep(min(60.0, left))
            log(f"outage: {time.monotonic() - down:.0f} s down, {fleet.spooled()} spooled")
        spooled = fleet.spooled()
        start_s = d.start()
        down_s = time.monotonic() - down
        drain_s = fleet.wait_drained(max(600.0, outage_s))
        log(f"outage: back after {down_s:.0f} s, {spooled} spooled, drained in {drain_s:.0f} s")
        time.sleep(after_s)
    finally:
        fleet.stop(120.0)
        d.stop()
    return {"hosts": hosts, "interval_s": interval_s, "outage_s": round(down_s, 1),
            "spooled_at_restart": spooled, "restart_s": round(start_s, 2),
            "drain_s": round(drain_s, 1), **fleet.count(d)}  # fmt: skip


def kills(home: Path, hosts: int, times: int, interval_s: float, *, seed: int,
          log: Callable[[str], None]) -> dict[str, Any]:  # fmt: skip
    """``times`` SIGKILLs of clavisd (its PID) under the fleet's load, each restarted."""
    rng = random.Random(seed)
    (home / "clavisd").mkdir()
    d = Clavisd(home / "clavisd", hosts, extra=f'[advice]\npath = "{home / "advice.json"}"\n'
                "[repack]\ninterval_s = 0\n")  # fmt: skip
    d.start()
    fleet = Fleet(home / "spools", d, hosts, interval_s, int(3600 / interval_s))
    fleet.start()
    restarts: list[float] = []
    acked_at_kill: list[int] = []
    try:
        for i in range(times):
            time.sleep(rng.uniform(3.0, 8.0))
            acked_at_kill.append(sum(len(h.sender.acked) for h in fleet.hosts))
            pid = d.pid
            d.kill9()
            restarts.append(d.start())
            log(
                f"kill -9 {i + 1}/{times}: pid {pid}, {acked_at_kill[-1]} acknowledged so far, "
                f"restarted in {restarts[-1]:.1f} s"
            )
        time.sleep(5.0)
    finally:
        drain_s = fleet.stop(300.0)
        d.stop()
    return {"hosts": hosts, "interval_s": interval_s, "kills": times,
            "restart_s_max": round(max(restarts, default=0.0), 2),
            "restart_s_median": round(sorted(restarts)[len(restarts) // 2], 2) if restarts else 0,
            "final_drain_s": round(drain_s, 1), **fleet.count(d)}  # fmt: skip
