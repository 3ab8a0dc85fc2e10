"""Host power: clavisd powers off physical hosts that consolidation emptied, and powers
them on again when placement asks (issue 17; docs/clavisd.md, Host power).

P counts an empty host at ``off_w`` (``empty_host: off``, docs/objectives.md): this
module makes that true. A host with no container for ``grace_s`` that has been on for
at least ``min_on_s`` gets ``chassis power soft`` (the OS shuts down cleanly), then
``chassis power off`` if it is still on after ``soft_timeout_s``. A power on waits out
``min_off_s`` after the power off, sends ``chassis power on`` and waits, at most
``on_timeout_s``, for the host's monitor to report. The two dwell times are the
hysteresis: a host that just came on is not switched off by the next empty moment, and
one just switched off is not cycled straight back (should_power_off, earliest_power_on).

A BMC that does not answer leaves its host ``unknown``, never ``off``: an unknown host
is not powered off and is not taken for a free one. Every action is a row of the audit
table ``power_events`` and a counter of ``/metrics``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Engine, func, select

from clavis.service.config import ConfigError
from clavis.service.hostpower_bmc import Bmc, BmcError, check_password_file
from clavis.service.hostpower_config import HostPowerConfig
from clavis.service.tables import containers, power_events

log = logging.getLogger("clavisd.hostpower")

PowerView = Literal["on", "off", "unknown", "powering-off", "powering-on"]
VIEWS: tuple[PowerView, ...] = ("on", "off", "unknown", "powering-off", "powering-on")
POLL_S = 1.0  # how often the BMC (power off) or the report time (power on) is re-read


@dataclass(frozen=True)
class HostState:
    power: PowerView
    since: float  # when the host was last switched or seen to switch between on and off
    empty_since: float | None  # since when it has held no container; None: it holds some


# --- hysteresis (pure) ---------------------------------------------------------------


def note_occupancy(state: HostState, containers: int, now: float) -> HostState:
    """The state with ``empty_since`` following the host's container count."""
    if containers > 0:
        return HostState(state.power, state.since, None)
    if state.empty_since is None:
        return HostState(state.power, state.since, now)
    return state


def should_power_off(
    state: HostState, now: float, grace_s: float, min_on_s: float, stay_on: bool
) -> bool:
    """True when the host is on, not kept on, empty for ``grace_s`` and on for ``min_on_s``."""
    return (
        not stay_on
        and state.power == "on"
        and state.empty_since is not None
        and now - state.empty_since >= grace_s
        and now - state.since >= min_on_s
    )


def earliest_power_on(state: HostState, now: float, min_off_s: float) -> float:
    """When a power on may be sent: ``min_off_s`` after the host went off, else now."""
    if state.power == "off":
        return max(now, state.since + min_off_s)
    return now


def seen(state: HostState, power: Literal["on", "off", "unknown"], now: float) -> HostState:
    """The state after a status answer (or none: unknown). ``since`` moves only when the
    host is seen on after off or off after on, so an unknown spell keeps the dwell clock."""
    if power in ("unknown", state.power):
        return HostState(power, state.since, state.empty_since)
    was = state.power
    switched = (was == "on" and power == "off") or (was == "off" and power == "on")
    return HostState(power, now if switched else state.since, state.empty_since)


def containers_per_host(engine: Engine) -> dict[str, int]:
    """How many containers the monitors last reported on each host (the store's view)."""
    q = select(containers.c.host, func.count()).group_by(containers.c.host)
    with engine.connect() as conn:
        return {host: int(n) for host, n in conn.execute(q)}


# --- the controller ------------------------------------------------------------------


@dataclass(frozen=True)
class PowerOnResult:
    host: str
    state: PowerView
    reported: bool
    message: str


class HostPower:
    """One clavisd's power controller: a thread that polls every BMC each ``interval_s``
    and powers off what should_power_off names; ``power_on`` for placement."""

    def __init__(
        self,
        cfg: HostPowerConfig,
        engine: Engine,
        *,
        hosts: Iterable[str],
        occupancy: Callable[[], Mapping[str, int]],
        reported: Callable[[str], float | None],
        now: float,
    ) -> None:
        check_password_file(cfg.bmc_password_file)
        known = set(hosts)
        strangers = sorted(set(cfg.bmcs) - known)
        if strangers:
            raise ConfigError(f"[host_power.bmcs] names hosts not in the cluster: {strangers}")
        self.cfg = cfg
        self.engine = engine
        self.occupancy = occupancy
        self.reported = reported
        self.bmcs = {h: Bmc(a, cfg.bmc_user, cfg.bmc_password_file, tuple(cfg.ipmitool),
                            cfg.cipher_suite, cfg.command_timeout_s)
                     for h, a in sorted(cfg.bmcs.items())}  # fmt: skip
        # Until a BMC answers, a host counts as on since clavisd started: min_on_s then
        # also protects hosts right after a restart.
        self.states = {h: HostState("unknown", now, None) for h in self.bmcs}
        self.actions: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._busy: set[str] = set()
        self._silent: set[str] = set()  # hosts whose BMC did not answer its last question
        # host -> until when it is not powered off: nodes are being started on it that
        # its monitor does not list yet (slurmpower.py)
        self._held: dict[str, float] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._loop = threading.Thread(target=self._run, name="hostpower", daemon=True)

    # --- lifecycle ---

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._stop.set()
        for t in [self._loop, *self._threads]:
            if t.is_alive():
                t.join(timeout=self.cfg.command_timeout_s + POLL_S)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick(time.time())
            except Exception:  # the edge of this thread: log, keep the loop alive
                log.exception("host power pass failed")
            self._stop.wait(self.cfg.interval_s)

    # --- audit and metrics ---

    def _audit(self, host: str, action: str, result: str, message: str) -> None:
        with self._lock:
            self.actions[(action, result)] += 1
        log.info("host power host=%s action=%s result=%s %s", host, action, result, message)
        with self.engine.begin() as conn:
            conn.execute(power_events.insert().values(host=host, action=action, result=result,
                                                      message=message, ts=time.time()))  # fmt: skip

    def events(self, host: str | None = None) -> list[dict[str, object]]:
        q = select(power_events).order_by(power_events.c.id)
        if host is not None:
            q = q.where(power_events.c.host == host)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def metrics_text(self) -> str:
        """Prometheus text format: actions by kind and result, hosts by state."""
        lines = [
            "# HELP clavis_host_power_actions_total BMC power actions of clavisd.",
            "# TYPE clavis_host_power_actions_total counter",
        ]
        with self._lock:
            actions = sorted(self.actions.items())
        for (action, result), n in actions:
            lines.append(
                f'clavis_host_power_actions_total{{action="{action}",result="{result}"}} {n}'
            )
        lines += ["# HELP clavis_host_power_state Power state of each host (1: its state).",
                  "# TYPE clavis_host_power_state gauge"]  # fmt: skip
        with self._lock:
            states = dict(self.states)
        for host, st in states.items():
            for view in VIEWS:
                lines.append(f'clavis_host_power_state{{host="{host}",state="{view}"}} '
                             f"{int(st.power == view)}")  # fmt: skip
        return "\n".join(lines) + "\n"

    # --- state ---

    def state(self, host: str) -> HostState:
        with self._lock:
            return self.states[host]

    def not_on(self) -> frozenset[str]:
        """Hosts not known to be on: placement and repacking must not use them."""
        with self._lock:
            return frozenset(h for h, st in self.states.items() if st.power != "on")

    def powered_down(self) -> frozenset[str]:
        """Hosts switched off, or being switched off or back on: the advice marks them
        unavailable at once, before their reports stop (a BMC that does not answer is
        not among them: its host's reports tell)."""
        with self._lock:
            return frozenset(h for h, st in self.states.items()
                             if st.power in ("off", "powering-off", "powering-on"))  # fmt: skip

    def hold(self, host: str, until: float) -> None:
        """Keep ``host`` from being powered off until ``until`` (unix time), even empty."""
        with self._lock:
            self._held[host] = max(until, self._held.get(host, 0.0))

    def _set(self, host: str, st: HostState) -> None:
        with self._lock:
            self.states[host] = st

    def probe(self, host: str, now: float) -> HostState:
        """Ask the BMC; an unanswered question makes the host unknown (audited once)."""
        try:
            power: Literal["on", "off", "unknown"] = self.bmcs[host].status()
            problem = ""
        except BmcError as exc:
            power, problem = "unknown", str(exc)
        after = seen(self.state(host), power, now)
        self._set(host, after)
        with self._lock:
            new = power == "unknown" and host not in self._silent
            back = power != "unknown" and host in self._silent
            if power == "unknown":
                self._silent.add(host)
            else:
                self._silent.discard(host)
        if new:
            self._audit(host, "status", "unknown", problem)
        elif back:
            self._audit(host, "status", power, "BMC answers again")
        return after

    # --- actions ---

    def tick(self, now: float) -> None:
        """One pass: every BMC's state, then a power off for each host that should go."""
        counts = self.occupancy()
        for host in self.bmcs:
            with self._lock:
                if host in self._busy:
                    continue
            st = note_occupancy(self.probe(host, now), counts.get(host, 0), now)
            self._set(host, st)
            with self._lock:
                held = self._held.get(host, 0.0) > now
            if not held and should_power_off(st, now, self.cfg.grace_s, self.cfg.min_on_s,
                                             host in self.cfg.stay_on):  # fmt: skip
                with self._lock:
                    self._busy.add(host)
                    self.states[host] = HostState("powering-off", st.since, st.empty_since)
                t = threading.Thread(target=self._power_off, args=(host,),
                                     name=f"power-off-{host}", daemon=True)  # fmt: skip
                self._threads = [x for x in self._threads if x.is_alive()] + [t]
                t.start()

    def _power_off(self, host: str) -> None:
        try:
            self.power_off(host)
        finally:
            with self._lock:
                self._busy.discard(host)

    def power_off(self, host: str) -> PowerView:
        """Soft first, ``off`` after ``soft_timeout_s``; the state the BMC then reports."""
        bmc, cfg = self.bmcs[host], self.cfg
        empty = self.state(host).empty_since
        try:
            bmc.command("soft")
            self._audit(host, "soft", "sent", "chassis power soft")
            deadline = time.monotonic() + cfg.soft_timeout_s
            while bmc.status() == "on" and time.monotonic() < deadline:
                if self._stop.wait(POLL_S):
                    break
            if self._stop.is_set():
                # A stop cut the soft wait short: a hard off now would not be the
                # configured grace the OS gets; the next clavisd decides afresh.
                self._audit(host, "off", "failed", "clavisd stopped during the soft shutdown")
                final = bmc.status()
                self._set(host, HostState(final, self.state(host).since, empty))
                return final
            if bmc.status() == "on":
                bmc.command("off")
                note = f"still on {cfg.soft_timeout_s:g} s after soft: chassis power off"
                self._audit(host, "off", "sent", note)
            final = bmc.status()
        except BmcError as exc:
            self._audit(host, "off", "unknown", str(exc))
            self._set(host, HostState("unknown", self.state(host).since, empty))
            return "unknown"
        now = time.time()
        self._set(host, HostState(final, now if final == "off" else self.state(host).since,
                                  empty))  # fmt: skip
        self._audit(host, "off", "ok" if final == "off" else "failed", f"BMC reports {final}")
        return final

    def power_on(self, host: str) -> PowerOnResult:
        """Power the host on for placement and wait, bounded, until its monitor reports.
        Raises KeyError for a host without a BMC entry."""
        bmc, cfg = self.bmcs[host], self.cfg
        with self._lock:
            if host in self._busy:
                return PowerOnResult(host, self.states[host].power, False,
                                     "a power action on this host is under way")  # fmt: skip
            self._busy.add(host)
        try:
            st = self.probe(host, time.time())
            was = st.power
            if st.power == "unknown":
                return PowerOnResult(host, "unknown", False, "BMC does not answer")
            wait = earliest_power_on(st, time.time(), cfg.min_off_s) - time.time()
            if wait > 0 and self._stop.wait(wait):
                return PowerOnResult(host, st.power, False, "clavisd is stopping")
            asked = time.time()
            if st.power == "off":
                try:
                    bmc.command("on")
                except BmcError as exc:
                    self._audit(host, "on", "unknown", str(exc))
                    self._set(host, HostState("unknown", st.since, st.empty_since))
                    return PowerOnResult(host, "unknown", False, str(exc))
                self._audit(host, "on", "sent", "chassis power on")
                self._set(host, HostState("powering-on", st.since, None))
            deadline = time.monotonic() + cfg.on_timeout_s
            while True:
                last = self.reported(host)
                if last is not None and last >= asked:
                    break
                if time.monotonic() >= deadline or self._stop.wait(POLL_S):
                    st = self.probe(host, time.time())
                    msg = f"no monitor report within {cfg.on_timeout_s:g} s of power on"
                    self._audit(host, "on", "timeout", msg)
                    return PowerOnResult(host, st.power, False, msg)
            now = time.time()
            st = self.probe(host, now)
            # Held on from its report on, so min_on_s counts from when it came back.
            self._set(host, HostState(st.power, now, None))
            done = "monitor reported after power on" if was == "off" else f"was {was}; reporting"
            self._audit(host, "on", "ok", done)
            return PowerOnResult(host, st.power, True, "on and reporting")
        finally:
            with self._lock:
                self._busy.discard(host)
