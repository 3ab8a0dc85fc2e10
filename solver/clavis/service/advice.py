"""The advice file for select_clavis.so: per Slurm node its host, rack, contention and
class, and per application its remembered class.

Written with an atomic rename, so the plugin reads the old file or the new one, never
half of one. Contention per host follows D's definition (docs/objectives.md) through the
one evaluator; a host without a recent report is "unknown", and so is a host without
devils that holds a container of unknown class (nothing measured, no hint, no memory):
"devil-free" is said only of hosts whose every container is known not to be a devil.
The applications are clavisd's per-application memory (``app_classes``) whose key is an
application key UID:NAME (the only ones select_clavis can match to a pending job), most
recently decided first, as many as fit in ``ADVICE_APPS_BYTES``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, Literal

from clavis.documents import InputError, write_json_atomic
from clavis.instance import build_instance
from clavis.objectives import contended_hosts
from clavis.service.rows import AppClassRow
from clavis.service.snapshot import Snapshot
from clavis_contracts import AdviceApp, AdviceFile, AdviceNode
from clavis_contracts.advice import MAX_APPS, Contention
from clavis_contracts.application import is_app_key

# The applications' share of the file: with 20,000 nodes (about 2 MB) the file stays under
# select_clavis's default AdviceMaxBytes (4 MiB), over which the plugin would ignore all
# of it. Typical entries take about 75 bytes (some 20,000 applications); the longest
# (240-byte job names) about 300. An application not among the newest that fit is
# placed as a new one.
ADVICE_APPS_BYTES: Final = 1_500_000
# One entry as json.dumps writes it, but its key's string: the longest class, a jobs_seen
# of 12 digits, the ", " before the next one.
_ENTRY_BYTES: Final = len(json.dumps({"app": "", "app_class": "turtle", "jobs_seen": 10**11})) + 2


def applications(rows: Iterable[AppClassRow], budget: int = ADVICE_APPS_BYTES) -> list[AdviceApp]:
    """The advice's applications from ``app_classes`` rows given newest first: keys that
    are application keys, with a class, while they fit in ``budget`` bytes of JSON (and
    the contract's MAX_APPS)."""
    out: list[AdviceApp] = []
    for r in rows:
        if len(out) == MAX_APPS:
            break
        if r.klass in ("devil", "turtle") and is_app_key(r.app):
            # as written: json.dumps escapes every non-ASCII character
            budget -= _ENTRY_BYTES + len(json.dumps(r.app))
            if budget < 0:
                break
            out.append(AdviceApp(app=r.app, app_class="devil" if r.klass == "devil" else "turtle",
                                 jobs_seen=max(1, r.jobs_seen)))  # fmt: skip
    return out


def build(snap: Snapshot, now: float, valid_s: float,
          apps: Iterable[AdviceApp] = ()) -> AdviceFile:  # fmt: skip
    racks = {h.name: h.rack for h in snap.cluster.hosts}
    stale = {h.name for h in snap.cluster.hosts if h.state != "up"}
    state: dict[str, Contention] = {}
    classes: dict[str, Literal["devil", "turtle", "unknown"]] = {}
    if snap.workload is not None:
        try:
            inst = build_instance(snap.cluster, snap.workload, snap.current, "current placement")
        except InputError:
            inst = None
        if inst is not None:
            current = tuple(h if h is not None else 0 for h in inst.current)
            hot = contended_hosts(inst, current)
            has_devil = {inst.hosts[h].name for c, h in zip(inst.containers, current, strict=True)
                         if c.devil}  # fmt: skip
            has_unknown = {snap.current.assignment[n] for n in snap.unknown}
            for i, h in enumerate(inst.hosts):
                state[h.name] = "contended" if i in hot else "ok" if h.name in has_devil \
                    else "unknown" if h.name in has_unknown else "devil-free"  # fmt: skip
            classes = {c.name: "unknown" if c.name in snap.unknown else
                       "devil" if c.devil else "turtle" for c in inst.containers}  # fmt: skip
    nodes = [
        AdviceNode(
            node=node, host=host, rack=racks[host],
            contention="unknown" if host in stale else state.get(host, "unknown"),
            node_class=classes.get(node, "unknown"),
        )
        for node, host in sorted(snap.current.assignment.items())
        if host in racks
    ]  # fmt: skip
    return AdviceFile(generated=dt.datetime.fromtimestamp(now, dt.UTC), valid_s=valid_s,
                      nodes=nodes, apps=list(apps))  # fmt: skip


def publish(path: Path, advice: AdviceFile, mode: int = 0o600, gid: int | None = None) -> None:
    publish_document(path, advice.model_dump(mode="json"), mode=mode, gid=gid)


def publish_document(
    path: Path, doc: dict[str, Any], mode: int = 0o600, gid: int | None = None
) -> None:
    """Write an AdviceFile already dumped to JSON data (clavisd re-issues one unchanged
    but for its time), with the configured mode and group (advice.mode, advice.group:
    a slurmctld running as SlurmUser reads it through its group)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Compact: rewritten every few seconds and read by a C plugin, not by people.
    write_json_atomic(path, doc, indent=None, mode=mode, gid=gid)
