"""Full advice builds in a child process, so they never hold the API process's interpreter.

A full build (snapshot of the store, scoring through the evaluator) takes about a second
of Python at 1000 hosts; in the API process it slowed ingest while it ran. The child reads
the store itself and answers each request with the advice as JSON data; clavisd writes
the file. Like the ingest writer, it exits when clavisd's end of its pipe closes (kill -9
included).
"""

from __future__ import annotations

import multiprocessing
import pickle
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from clavis.documents import load_cluster
from clavis.model import Cluster
from clavis.service import advice, snapshot
from clavis.service.classify import Thresholds
from clavis.service.config import ClassifyConfig
from clavis.service.gcpolicy import long_lived_heap
from clavis.service.store import Store


def build_document(store: Store, cluster: Cluster, now: float, *, fresh_s: float,
                   classify: ClassifyConfig, valid_s: float,
                   down: frozenset[str] = frozenset()) -> dict[str, Any]:  # fmt: skip
    """The advice from the store's current state, as JSON data (an AdviceFile); ``down``:
    hosts host power switched off or is switching (HostPower.powered_down), unavailable
    like hosts that stopped reporting."""
    snap = snapshot.take(
        cluster, hosts=store.hosts(), containers=store.containers(),
        power_models=store.power_models(), now=now, fresh_s=fresh_s,
        thresholds=Thresholds(classify.devil_threshold_mpki, classify.host_thresholds),
        not_on=down,
    )  # fmt: skip
    apps = advice.applications(store.app_class_rows())
    return advice.build(snap, now, valid_s, apps).model_dump(mode="json")


def _child(
    conn: Connection, url: str, cluster_file: str, params: tuple[float, ClassifyConfig, float]
) -> None:
    store = Store(url)
    cluster = load_cluster(Path(cluster_file))
    long_lived_heap()
    conn.send_bytes(b"ready")
    while True:
        try:
            now, down = pickle.loads(conn.recv_bytes())  # from clavisd, its parent
        except (EOFError, OSError):
            break
        try:
            fresh_s, classify, valid_s = params
            doc: dict[str, Any] | str = build_document(
                store, cluster, float(now), fresh_s=fresh_s, classify=classify,
                valid_s=valid_s, down=frozenset(down),
            )  # fmt: skip
        except Exception as exc:  # reported to clavisd, which logs it
            doc = f"advice build failed: {exc!r}"
        conn.send_bytes(pickle.dumps(doc))
    store.close()


class AdviceWorker:
    def __init__(self, url: str, cluster_file: Path, fresh_s: float, classify: ClassifyConfig,
                 valid_s: float) -> None:  # fmt: skip
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        params = (fresh_s, classify, valid_s)
        self._proc = ctx.Process(target=_child, args=(child, url, str(cluster_file), params),
                                 name="clavisd-advice", daemon=True)  # fmt: skip
        self._child_end = child

    def start(self) -> None:
        self._proc.start()
        self._child_end.close()
        if not self._conn.poll(60) or self._conn.recv_bytes() != b"ready":
            raise RuntimeError("the advice process did not start")

    def alive(self) -> bool:
        return self._proc.is_alive()

    def build(
        self, now: float, down: frozenset[str] = frozenset(), timeout_s: float = 120.0
    ) -> dict[str, Any]:
        """Called by one thread at a time (clavisd's maintenance loop)."""
        self._conn.send_bytes(pickle.dumps((now, sorted(down))))
        if not self._conn.poll(timeout_s):
            raise RuntimeError(f"the advice process did not answer within {timeout_s:g} s")
        doc = pickle.loads(self._conn.recv_bytes())
        if isinstance(doc, str):
            raise RuntimeError(doc)
        return dict(doc)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._conn.close()  # the child sees EOF and exits
        self._proc.join(timeout_s)
