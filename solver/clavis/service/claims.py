"""Which host a container belongs to, as far as reports may claim it.

A container's name is unique in the cluster, and a report that lists it moves it to the
reporting host. Host keys (auth.py) stop a host from reporting *as* another host, but a
host could still list another host's container in its own report and so take it over.
This rule refuses that: a report may not list a container that another host listed in
its own last report while that report is still fresh (``ingest.max_report_age_s``),
unless a running plan is moving that container from that host to the reporting one. A
container that really moved (by Clavis, or by hand: then one report of the new host is
refused until the old host's next report no longer lists it) is taken over as soon as its
old host stops listing it or goes quiet.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from clavis.service.store import Store

# A step in these states may have the container on its target already.
_UNDER_WAY: Final = frozenset({"dispatched", "accepted", "running", "done"})


class ContainerClaims:
    """The containers each host listed in its last accepted report; thread-safe."""

    def __init__(self, rows: Iterable[tuple[str, str]], fresh_s: float) -> None:
        """``rows``: (container, host) as the store has them at start."""
        self.fresh_s = fresh_s
        self._owner: dict[str, str] = {}
        self._listed: dict[str, set[str]] = {}
        for name, host in rows:
            self._owner[name] = host
            self._listed.setdefault(host, set()).add(name)
        self._lock = threading.Lock()

    def taken(
        self,
        host: str,
        names: Iterable[str],
        ts: float,
        now: float,
        last_report: Mapping[str, float],
        *,
        moving: Callable[[str, str, str], bool],
    ) -> list[tuple[str, str]]:
        """(container, owner) for each of ``names`` another host still holds against a
        report of ``host`` stamped ``ts``; ``moving`` (container, source, target) says
        whether a running plan moves it to ``host``. A report older than the owner's
        listing is a late one (a spooled backlog): it takes nothing over (the store keeps
        the newer row), so it passes."""
        out = []
        with self._lock:
            for name in names:
                owner = self._owner.get(name)
                if owner is None or owner == host or name not in self._listed.get(owner, ()):
                    continue
                since = last_report.get(owner, float("-inf"))
                if now - since > self.fresh_s or ts <= since:
                    continue  # its host went quiet (it may have moved), or a late report
                out.append((name, owner))
        return [(n, o) for n, o in out if not moving(n, o, host)]

    def record(
        self, host: str, names: Iterable[str], ts: float, last_report: Mapping[str, float]
    ) -> None:
        """``host``'s accepted report stamped ``ts`` listed exactly ``names``; a name
        another host listed later stays that host's."""
        now_listed = set(names)
        with self._lock:
            for gone in self._listed.get(host, set()) - now_listed:
                if self._owner.get(gone) == host:
                    del self._owner[gone]
            for name in now_listed:
                before = self._owner.get(name)
                if before is not None and before != host:
                    if last_report.get(before, float("-inf")) >= ts:
                        continue
                    self._listed.get(before, set()).discard(name)
                self._owner[name] = host
            self._listed[host] = now_listed


def planned_moves(store: Store) -> Callable[[str, str, str], bool]:
    """``moving(container, source, target)``: a running plan moves it so (asked only
    when a claim collides, which is rare)."""

    def moving(container: str, source: str, target: str) -> bool:
        return any(
            st.step.move.container == container and st.step.move.source == source
            and st.step.move.target == target and st.state in _UNDER_WAY
            for p in store.plans(["running"])
            for st in store.steps(p.id)
        )  # fmt: skip

    return moving
