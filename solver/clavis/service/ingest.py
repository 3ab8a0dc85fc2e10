"""Ingest: validated monitor reports → samples, container state and classes, in batches.

The API validates and authenticates each report by itself before it reaches this
module, so a malformed report never touches the store. Accepted reports queue for one
writer thread that commits them in batches (group commit: many reports per fsync) and
answers each report only once its batch is durable. If a batch fails, its reports are
retried one by one, so one failing report cannot take another host's data with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import pydantic_core
from pydantic_core import from_json
from sqlalchemy import Connection, bindparam, delete, insert
from sqlalchemy import update as sql_update
from sqlalchemy.exc import InterfaceError, OperationalError

from clavis.service import tables as t
from clavis.service.classify import (
    ClassState,
    Hysteresis,
    Klass,
    Thresholds,
    job_class,
    observe,
    remembered,
    vote,
)
from clavis.service.config import ClassifyConfig
from clavis.service.store import FastInsert, Store, dialect_insert, upsert, upsert_statement
from clavis_contracts import MonitorReport
from clavis_contracts.signing import Signed

log = logging.getLogger("clavisd.ingest")


@dataclass
class _Pending:
    item: Accepted
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future[Written]


@dataclass
class ClassBook:
    """In-memory classification state, loaded from the store and written back with it."""

    containers: dict[str, ClassState] = field(default_factory=dict)
    container_job: dict[str, str | None] = field(default_factory=dict)
    jobs: dict[str, Klass | None] = field(default_factory=dict)
    # Each job's application as stored: a node migrated to another host is reported by
    # that host's monitor, which saw no SPANK registration of the job (the job id comes
    # from the cgroup scan, the application only from the registration).
    job_apps: dict[str, str] = field(default_factory=dict)
    # The user's --clavis-class of a job, for the same reason: it too comes only with
    # the registration, and a moved node must keep it.
    job_hints: dict[str, str] = field(default_factory=dict)
    apps: dict[str, Klass] = field(default_factory=dict)
    job_members: dict[str, set[str]] = field(default_factory=dict)
    # Where each stored container is and the time of the sample that put it there, as in
    # the store's containers table (which this book mirrors), and the reverse index.
    placed: dict[str, tuple[str, float]] = field(default_factory=dict)
    host_members: dict[str, set[str]] = field(default_factory=dict)

    def set_job(self, container: str, job: str | None) -> None:
        old = self.container_job.get(container)
        if old is not None and old != job:
            self.job_members.get(old, set()).discard(container)
        self.container_job[container] = job
        if job is not None:
            self.job_members.setdefault(job, set()).add(container)

    def place(self, container: str, host: str, ts: float) -> None:
        old = self.placed.get(container)
        if old is not None:
            self.host_members.get(old[0], set()).discard(container)
        self.placed[container] = (host, ts)
        self.host_members.setdefault(host, set()).add(container)

    def forget(self, container: str) -> None:
        """A container its host no longer lists: gone from the store, so from the book."""
        self.set_job(container, None)
        self.container_job.pop(container, None)
        self.containers.pop(container, None)
        old = self.placed.pop(container, None)
        if old is not None:
            self.host_members.get(old[0], set()).discard(container)

    @staticmethod
    def load(store: Store) -> ClassBook:
        book = ClassBook()
        for c in store.containers():
            book.containers[c.name] = ClassState(c.klass, c.class_source, c.votes)
            book.set_job(c.name, c.job)
            book.place(c.name, c.host, c.updated)
            if c.job is not None and c.class_hint is not None:
                book.job_hints[c.job] = c.class_hint
        for j in store.jobs():
            book.jobs[j.name] = j.klass
            book.job_apps[j.name] = j.app
        book.apps = {a: k for a, k in store.app_classes().items() if k in ("devil", "turtle")}  # type: ignore[misc]
        return book


@dataclass
class _Staged:
    """What one batch changes: rows to write and the class book after it."""

    # Rows as tuples in the column order of _HOST_SAMPLE, _CONTAINER_SAMPLE, _HOST, _CONTAINER.
    host_samples: list[tuple[Any, ...]] = field(default_factory=list)
    container_samples: list[tuple[Any, ...]] = field(default_factory=list)
    hosts: list[tuple[Any, ...]] = field(default_factory=list)
    nonces: list[tuple[str, float]] = field(default_factory=list)
    containers: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    container_jobs: dict[str, str | None] = field(default_factory=dict)
    changes: list[dict[str, Any]] = field(default_factory=list)
    states: dict[str, ClassState] = field(default_factory=dict)
    touched_jobs: dict[str, str] = field(default_factory=dict)  # job -> app
    # Containers whose host's newest report in the batch no longer lists them: (name,
    # host, that report's time); deleted only if still stored on that host and older.
    expired: list[tuple[str, str, float]] = field(default_factory=list)


@dataclass(frozen=True)
class Accepted:
    """A report that passed every check of ``reports.accept``, as the writer needs it: its
    timestamp, its JSON body parsed as plain data (already validated against the
    contract, so the writer only reads it, with the contract's defaults for absent
    optional fields), and its request's nonce, stored with it."""

    ts: float
    doc: dict[str, Any]
    signed: Signed | None = None

    @staticmethod
    def of(report: MonitorReport, raw: bytes = b"", signed: Signed | None = None) -> Accepted:
        doc = from_json(raw) if raw else report.model_dump(mode="json")
        return Accepted(report.timestamp.timestamp(), doc, signed)


def stage(batch: list[Accepted], book: ClassBook, cfg: ClassifyConfig) -> _Staged:
    """Rows and class changes for a batch (pure with respect to the store). Numbers go
    through float()/int() as the contract's validation would have made them."""
    rule = Hysteresis(cfg.window, cfg.votes)
    thresholds = Thresholds(cfg.devil_threshold_mpki, cfg.host_thresholds)
    out = _Staged()
    out.nonces = [(a.signed.nonce, a.signed.timestamp) for a in batch if a.signed is not None]
    latest: dict[str, tuple[float, set[str]]] = {}  # host -> its newest report's time, names
    for a in batch:
        r, ts = a.doc, a.ts
        if ts > latest.get(r["host"], (-1.0, set()))[0]:
            latest[r["host"]] = (ts, {c["name"] for c in r.get("containers", ())})
        host, interval, busy = r["host"], float(r["interval_s"]), float(r["busy_cores"])
        watts = r["power"]["watts"]
        watts = None if watts is None else float(watts)
        out.host_samples.append((host, ts, interval, busy, watts, r["power"]["source"]))
        out.hosts.append((host, ts, busy, watts))
        threshold = thresholds.of(host)
        for c in r.get("containers", ()):
            name, job = c["name"], c.get("job")
            mpki = c["intensity_mpki"]
            mpki = None if mpki is None else float(mpki)
            c_busy = float(c["busy_cores"])
            traffic = to_json({p["peer"]: float(p["bytes_per_s"]) for p in c.get("traffic", ())})
            app = c.get("app") or (book.job_apps.get(job) if job is not None else None) or job
            hint = c.get("class_hint") or (book.job_hints.get(job) if job is not None else None)
            prev = out.states.get(name) or book.containers.get(name)
            if prev is None or book.container_job.get(name) != job:
                # A new container, or a new job on it: start from the application's class.
                prev = remembered(book.apps.get(app) if app else None)
                if prev.klass is not None:
                    out.changes.append({"container": name, "job": job, "klass": prev.klass,
                                        "source": "memory", "ts": ts})  # fmt: skip
            state = observe(prev, vote(mpki, threshold), rule)
            if state.klass != prev.klass and state.klass is not None:
                out.changes.append({"container": name, "job": job, "klass": state.klass,
                                    "source": "samples", "ts": ts})  # fmt: skip
            out.states[name] = state
            if job is not None:
                out.touched_jobs[job] = app or job
            out.container_samples.append((
                name, host, job, ts, interval, c_busy, mpki, c["intensity_source"], traffic,
            ))  # fmt: skip
            row = out.containers.get(name)
            if row is None or row[_UPDATED] < ts:  # as the store's upsert: the newest wins
                out.containers[name] = (
                    name, host, job, app, int(c["cores"]), int(c["memory_bytes"]), c_busy,
                    mpki, state.klass, state.source, state.votes, traffic, ts, hint,
                )  # fmt: skip
            out.container_jobs[name] = job
    out.expired = _expired(latest, out.containers, book)
    return out


def _expired(
    latest: dict[str, tuple[float, set[str]]],
    rows: dict[str, tuple[Any, ...]],
    book: ClassBook,
) -> list[tuple[str, str, float]]:
    """Containers a host's newest report no longer lists: a host reports every container it
    runs, so one it leaves out is gone (issue 15: the snapshot must keep no ghost)."""
    where = dict(book.placed)
    for name, row in rows.items():
        if name not in where or where[name][1] < row[_UPDATED]:
            where[name] = (row[1], row[_UPDATED])
    out = []
    for host, (ts, listed) in latest.items():
        candidates = book.host_members.get(host, set()) | {
            n for n, row in rows.items() if row[1] == host
        }
        for name in sorted(candidates - listed):
            on, since = where[name]
            if on == host and since < ts:
                out.append((name, host, ts))
    return out


class Ingestor:
    """Owns the writer thread; ``submit`` returns a future set when the report is stored."""

    def __init__(self, store: Store, cfg: ClassifyConfig, batch_max: int, batch_wait_s: float):
        self.store = store
        self.cfg = cfg
        self.batch_max = batch_max
        self.batch_wait_s = batch_wait_s
        self.book = ClassBook.load(store)
        self._sql = _Statements(store.engine.dialect.name)
        self.stored = 0
        self._queue: queue.Queue[_Pending] = queue.Queue(maxsize=100_000)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ingest-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def submit(
        self, report: MonitorReport, raw: bytes = b"", signed: Signed | None = None
    ) -> asyncio.Future[Written]:
        """Queue a report (from the event loop); the future says whether it was stored.
        ``signed`` names its request's nonce, stored with it."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Written] = loop.create_future()
        self._queue.put_nowait(_Pending(Accepted.of(report, raw, signed), loop, done))
        return done

    def _run(self) -> None:
        while not self._stop.is_set() or not self._queue.empty():
            batch = take_batch(self._queue, self.batch_max, self.batch_wait_s)
            if batch:
                oks = self.write_batch([p.item for p in batch])
                settle([(p.loop, p.done, ok) for p, ok in zip(batch, oks, strict=True)])

    def write_batch(self, batch: list[Accepted]) -> list[Written]:
        """Store a batch in one transaction; if that fails, each report on its own. A
        report that fails on its own is ``retry`` when the store could not be reached or
        written (the agent sends it again later), else ``refused``: the same bytes would
        fail again, and an agent retrying them would hold back every later report of its
        host behind them, for as long as clavisd accepts the report's age."""
        try:
            self._commit(batch)
        except Exception as exc:
            if len(batch) == 1:
                written: Written = (
                    "retry" if isinstance(exc, OperationalError | InterfaceError) else "refused"
                )
                host = batch[0].doc.get("host")
                log.exception("ingest: report of host=%s not stored (%s)", host, written)
                return [written]
            log.warning("ingest: batch of %d failed; storing its reports one by one", len(batch))
            return [w for a in batch for w in self.write_batch([a])]
        return ["stored"] * len(batch)

    def _commit(self, batch: list[Accepted]) -> None:
        staged = stage(batch, self.book, self.cfg)
        jobs = self._job_rows(staged)
        with self.store.engine.begin() as conn:
            _write_rows(conn, self._sql, staged, jobs)
        # Only a committed batch changes the in-memory book.
        self.book.containers.update(staged.states)
        for name, job in staged.container_jobs.items():
            self.book.set_job(name, job)
        for name, row in staged.containers.items():
            if name not in self.book.placed or self.book.placed[name][1] < row[_UPDATED]:
                self.book.place(name, row[1], row[_UPDATED])
            if row[2] is not None and row[_HINT] is not None:
                self.book.job_hints[row[2]] = row[_HINT]
        for name, host, _ in staged.expired:
            log.info("container=%s host=%s no longer reported: removed", name, host)
            self.book.forget(name)
        for j in jobs:
            self.book.jobs[j["name"]] = j["klass"]
            self.book.job_apps[j["name"]] = j["app"]
            if j["klass"] is not None:
                self.book.apps[j["app"]] = j["klass"]
        self.stored += len(batch)

    def _job_rows(self, staged: _Staged) -> list[dict[str, Any]]:
        if not staged.touched_jobs:
            return []
        members: dict[str, list[Klass | None]] = {j: [] for j in staged.touched_jobs}
        for job, found in members.items():
            for name in self.book.job_members.get(job, ()):
                if name not in staged.container_jobs:
                    found.append(self.book.containers[name].klass)
        for name, member_of in staged.container_jobs.items():
            if member_of is not None and member_of in members:
                members[member_of].append(staged.states[name].klass)
        rows = []
        for job, app in staged.touched_jobs.items():
            klass = job_class(members[job])
            if (job not in self.book.jobs or self.book.jobs[job] != klass
                    or self.book.job_apps.get(job) != app):  # fmt: skip
                rows.append({"name": job, "app": app, "klass": klass, "updated": time.time()})
        return rows


_HOST_SAMPLE = ("host", "ts", "resolution_s", "busy_cores", "watts", "power_source")
_CONTAINER_SAMPLE = ("container", "host", "job", "ts", "resolution_s", "busy_cores",
                     "intensity_mpki", "intensity_source", "traffic")  # fmt: skip
_HOST = ("b_name", "b_ts", "b_busy", "b_watts")
_CONTAINER = ("name", "host", "job", "app", "cores", "memory_bytes", "busy_cores",
              "intensity_mpki", "klass", "class_source", "votes", "traffic", "updated",
              "class_hint")  # fmt: skip
_UPDATED = _CONTAINER.index("updated")
_HINT = _CONTAINER.index("class_hint")


class _Statements:
    """The ingest's statements, compiled once per dialect (see store.FastInsert)."""

    def __init__(self, dialect: str) -> None:
        self.host_samples = FastInsert(insert(t.host_samples), _HOST_SAMPLE)
        self.nonces = FastInsert(insert(t.nonces), ("nonce", "signed"))
        self.container_samples = FastInsert(insert(t.container_samples), _CONTAINER_SAMPLE)
        self.hosts = FastInsert(
            sql_update(t.hosts)
            .where(t.hosts.c.name == bindparam("b_name"))
            .values(
                last_report=bindparam("b_ts"),
                busy_cores=bindparam("b_busy"),
                watts=bindparam("b_watts"),
            ),
            _HOST,
        )
        self.containers = FastInsert(
            upsert_statement(dialect, t.containers, _CONTAINER, ["name"], newer="updated"),
            _CONTAINER,
        )
        c = t.containers.c
        self.expire = FastInsert(
            delete(t.containers).where(
                (c.name == bindparam("x_name"))
                & (c.host == bindparam("x_host"))
                & (c.updated < bindparam("x_ts"))
            ),
            ("x_name", "x_host", "x_ts"),
        )


T = TypeVar("T")


def to_json(value: Any) -> str:
    """Compact JSON text (pydantic-core's encoder: one C call, about 5x json.dumps here)."""
    return pydantic_core.to_json(value).decode()


# What became of a report: stored; not stored now (the store failed: send it again); or
# refused (it fails on its own every time).
Written = Literal["stored", "retry", "refused"]
Outcome = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Written]", Written]


def settle(outcomes: list[Outcome]) -> None:
    """From a writer thread: set each report's future, one wake-up per event loop and
    batch rather than one per report (each costs a write to the loop's self-pipe)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Written], Written]]] = {}
    for loop, fut, ok in outcomes:
        by_loop.setdefault(loop, []).append((fut, ok))
    for loop, items in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
            loop.call_soon_threadsafe(_set_all, items)


def _set_all(items: list[tuple[asyncio.Future[Written], Written]]) -> None:
    for fut, ok in items:
        if not fut.done():
            fut.set_result(ok)


def take_batch(q: queue.Queue[T], batch_max: int, wait_s: float) -> list[T]:
    """Up to ``batch_max`` items: the first within 0.2 s, the rest within ``wait_s``."""
    try:
        batch = [q.get(timeout=0.2)]
    except queue.Empty:
        return []
    deadline = time.monotonic() + wait_s
    while len(batch) < batch_max:
        left = deadline - time.monotonic()
        try:
            batch.append(q.get(timeout=left) if left > 0 else q.get_nowait())
        except queue.Empty:
            break
    return batch


def _write_rows(conn: Connection, q: _Statements, s: _Staged, jobs: list[dict[str, Any]]) -> None:
    q.nonces.run(conn, s.nonces)  # first: a replayed nonce fails the batch before the rest
    q.host_samples.run(conn, s.host_samples)
    q.container_samples.run(conn, s.container_samples)
    q.hosts.run(conn, s.hosts)
    q.containers.run(conn, list(s.containers.values()))
    q.expire.run(conn, s.expired)
    if s.changes:
        conn.execute(insert(t.classifications), s.changes)
    upsert(conn, t.jobs, jobs, ["name"])
    apps = [{"app": j["app"], "klass": j["klass"], "jobs_seen": 1, "updated": j["updated"]}
            for j in jobs if j["klass"] is not None]  # fmt: skip
    if apps:
        # jobs_seen counts the class decisions of the application's jobs (one per job, plus
        # one per later change of class), so the UI can tell a guess from a habit.
        stmt = dialect_insert(conn.dialect.name, t.app_classes)
        stmt = stmt.on_conflict_do_update(
            index_elements=["app"],
            set_={"klass": stmt.excluded.klass, "updated": stmt.excluded.updated,
                  "jobs_seen": t.app_classes.c.jobs_seen + 1},
        )  # fmt: skip
        conn.execute(stmt, apps)
