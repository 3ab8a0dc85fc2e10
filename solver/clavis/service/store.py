"""The store: SQLite by default, PostgreSQL by URL; every query in portable SQLAlchemy Core.

One :class:`Store` per process. The ingest writer thread, the API handlers and the
repack executor each take a connection per unit of work; SQLite runs in WAL mode so
readers never block the writer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, delete, event, func, insert, select
from sqlalchemy import update as sql_update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import StaticPool

from clavis.model import Cluster
from clavis.service import tables as t
from clavis.service.pausepoints import pause_point
from clavis.service.plan import Move, Step
from clavis.service.power import PowerFit
from clavis.service.rows import (
    AppClassRow,
    ClassChangeRow,
    ContainerRow,
    FrontRow,
    HostRow,
    JobRow,
    PlacementInput,
    PlanRow,
    PowerModelRow,
    Session,
    StepEvent,
    StoredStep,
    WeightsRow,
)


class StoreError(Exception):
    """The store cannot be opened or is inconsistent."""


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL: readers do not block the ingest writer; NORMAL is durable across a process
    # crash (kill -9), which is the failure clavisd must survive.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def upsert(conn: Connection, table: Any, rows: Sequence[Mapping[str, Any]], key: list[str]) -> None:
    """Insert rows, replacing the non-key columns of rows whose key exists."""
    if not rows:
        return
    maker = sqlite_insert if conn.dialect.name == "sqlite" else pg_insert
    stmt = maker(table)
    cols = [c for c in rows[0] if c not in key]
    stmt = stmt.on_conflict_do_update(
        index_elements=key, set_={c: getattr(stmt.excluded, c) for c in cols}
    )
    conn.execute(stmt, list(rows))


class FastInsert:
    """One statement compiled once for the connection's dialect and run through the
    driver's executemany: SQLAlchemy's per-row parameter processing is most of the ingest
    cost at 10^4 rows/s, and these rows need none of it (plain numbers and strings)."""

    def __init__(self, stmt: Any, columns: Sequence[str]) -> None:
        self.stmt = stmt
        self.columns = list(columns)
        self._compiled: dict[str, tuple[str, list[int] | None]] = {}

    def run(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        """Rows are tuples in the order of ``columns``."""
        if not rows:
            return
        name = conn.dialect.name
        if name not in self._compiled:
            c = self.stmt.compile(dialect=conn.dialect, column_keys=self.columns)
            perm = [self.columns.index(k) for k in c.positiontup] if c.positional else None
            self._compiled[name] = (str(c), perm)
        sql, perm = self._compiled[name]
        if perm is None:
            conn.exec_driver_sql(sql, [dict(zip(self.columns, r, strict=True)) for r in rows])
        elif perm == list(range(len(self.columns))):
            conn.exec_driver_sql(sql, list(rows))
        else:
            conn.exec_driver_sql(sql, [tuple(r[i] for i in perm) for r in rows])


def dialect_insert(dialect: str, table: Any) -> Any:
    """An INSERT that can take ON CONFLICT (SQLite and PostgreSQL spell it the same)."""
    return sqlite_insert(table) if dialect == "sqlite" else pg_insert(table)


def upsert_statement(
    dialect: str, table: Any, columns: Sequence[str], key: list[str], newer: str | None = None
) -> Any:
    """INSERT or UPDATE by ``key``; with ``newer``, an existing row is updated only when the
    new row's ``newer`` column is greater (a late row never overwrites a later one)."""
    stmt = dialect_insert(dialect, table)
    where = None if newer is None else table.c[newer] < getattr(stmt.excluded, newer)
    return stmt.on_conflict_do_update(
        index_elements=key,
        set_={c: getattr(stmt.excluded, c) for c in columns if c not in key},
        where=where,
    )


class Store:
    def __init__(self, url: str, now: float | None = None) -> None:
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):
            if url in {"sqlite://", "sqlite:///:memory:"}:
                kwargs["poolclass"] = StaticPool  # one shared in-memory database (tests)
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 10}
        try:
            self.engine: Engine = create_engine(url, **kwargs)
        except Exception as exc:
            raise StoreError(f"store url {url!r}: {exc}") from exc
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        with self.engine.begin() as conn:
            self.applied = t.migrate(conn, now if now is not None else time.time())

    def close(self) -> None:
        self.engine.dispose()

    # --- hosts and containers -----------------------------------------------------

    def sync_hosts(self, cluster: Cluster) -> None:
        """The cluster file is the inventory: add its hosts, update rack and cores."""
        rows = [{"name": h.name, "rack": h.rack, "cores": h.cores} for h in cluster.hosts]
        with self.engine.begin() as conn:
            upsert(conn, t.hosts, rows, ["name"])

    def hosts(self) -> list[HostRow]:
        with self.engine.connect() as conn:
            return [HostRow(**r._mapping) for r in conn.execute(select(t.hosts).order_by("name"))]

    def last_reports(self) -> dict[str, float]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.hosts.c.name, t.hosts.c.last_report))
            return {name: ts for name, ts in rows if ts is not None}

    def containers(self) -> list[ContainerRow]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.containers).order_by("name"))
            return [ContainerRow(**{**r._mapping, "traffic": json.loads(r.traffic)})
                    for r in rows]  # fmt: skip

    def placement_inputs(self) -> list[PlacementInput]:
        """Per container what the advice depends on (not its traffic); cheap enough to
        read every few seconds."""
        c = t.containers.c
        q = select(c.name, c.host, c.job, c.cores, c.memory_bytes, c.klass, c.class_hint,
                   c.intensity_mpki)  # fmt: skip
        with self.engine.connect() as conn:
            return [PlacementInput(**r._mapping) for r in conn.execute(q.order_by(c.name))]

    def app_classes_version(self) -> tuple[int, float | None]:
        """How many applications have a class and when one last changed: the advice's
        application list is rebuilt when this changes."""
        a = t.app_classes.c
        with self.engine.connect() as conn:
            n, last = conn.execute(select(func.count(), func.max(a.updated))).one()
        return int(n), last

    def app_class_rows(self) -> list[AppClassRow]:
        """Application classes, most recently decided first."""
        a = t.app_classes.c
        q = select(a.app, a.klass, a.jobs_seen, a.updated).order_by(a.updated.desc(), a.app)
        with self.engine.connect() as conn:
            return [AppClassRow(**r._mapping) for r in conn.execute(q)]

    def jobs(self) -> list[JobRow]:
        with self.engine.connect() as conn:
            return [JobRow(**r._mapping) for r in conn.execute(select(t.jobs).order_by("name"))]

    def app_classes(self) -> dict[str, str]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.app_classes.c.app, t.app_classes.c.klass))
            return {r.app: r.klass for r in rows}

    def count(self, table: Any) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table)).scalar_one())

    # --- samples --------------------------------------------------------------------

    def power_samples(self, host: str, since: float) -> tuple[list[float], list[float]]:
        q = (
            select(t.host_samples.c.busy_cores, t.host_samples.c.watts)
            .where(t.host_samples.c.host == host)
            .where(t.host_samples.c.ts >= since)
            .where(t.host_samples.c.watts.is_not(None))
        )
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        return [r[0] for r in rows], [r[1] for r in rows]

    def apply_retention(self, now: float, raw_s: float, keep_s: float, bucket_s: float) -> int:
        """Downsample host samples older than ``raw_s`` to one mean per host and bucket,
        drop container samples older than ``raw_s`` (their effect lives on in the class
        and per-application memory), and drop everything older than ``keep_s``."""
        hs = t.host_samples
        cutoff = now - raw_s
        bucket = func.floor(hs.c.ts / bucket_s)
        with self.engine.begin() as conn:
            conn.execute(delete(hs).where(hs.c.ts < now - keep_s))
            raw = (hs.c.ts < cutoff) & (hs.c.resolution_s < bucket_s)
            means = conn.execute(
                select(
                    hs.c.host,
                    bucket.label("b"),
                    func.avg(hs.c.busy_cores),
                    func.avg(hs.c.watts),
                    func.min(hs.c.power_source),
                )
                .where(raw)
                .group_by(hs.c.host, bucket)
            ).all()
            conn.execute(delete(hs).where(raw))
            rows = [
                {"host": h, "ts": (b + 0.5) * bucket_s, "resolution_s": bucket_s,
                 "busy_cores": busy, "watts": watts, "power_source": src}
                for h, b, busy, watts, src in means
            ]  # fmt: skip
            if rows:
                conn.execute(insert(hs), rows)
            gone = conn.execute(
                delete(t.container_samples).where(t.container_samples.c.ts < cutoff)
            )
            return len(rows) + gone.rowcount

    # --- power models -----------------------------------------------------------------

    def save_power_model(self, host: str, f: PowerFit, now: float) -> None:
        row = {"host": host, "idle_w": f.idle_w, "slope_w": f.slope_w, "r2": f.r2,
               "rmse_w": f.rmse_w, "samples": f.samples, "fitted": now}  # fmt: skip
        with self.engine.begin() as conn:
            upsert(conn, t.power_models, [row], ["host"])

    def power_models(self) -> dict[str, PowerModelRow]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.power_models))
            return {r.host: PowerModelRow(**r._mapping) for r in rows}

    # --- weights ------------------------------------------------------------------------

    def add_weights(self, doc: str, user: str, now: float) -> int:
        with self.engine.begin() as conn:
            r = conn.execute(insert(t.weights).values(created=now, user=user, doc=doc))
            return int(r.inserted_primary_key[0])  # type: ignore[index]

    def weights_history(self, limit: int) -> list[WeightsRow]:
        """Weights made current, newest first."""
        w = t.weights
        q = select(w.c.id, w.c.created, w.c.user, w.c.doc).order_by(w.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [WeightsRow(**r._mapping) for r in conn.execute(q)]

    def current_weights(self) -> tuple[int, str] | None:
        """The newest stored weights file: its id and document."""
        q = select(t.weights.c.id, t.weights.c.doc).order_by(t.weights.c.id.desc()).limit(1)
        with self.engine.connect() as conn:
            r = conn.execute(q).first()
        return None if r is None else (int(r[0]), str(r[1]))

    # --- fronts and picks (calibration) -----------------------------------------------

    def add_front(self, doc: str, now: float) -> int:
        with self.engine.begin() as conn:
            r = conn.execute(insert(t.fronts).values(created=now, doc=doc))
            return int(r.inserted_primary_key[0])  # type: ignore[index]

    def front(self, front_id: int) -> FrontRow | None:
        with self.engine.connect() as conn:
            r = conn.execute(select(t.fronts).where(t.fronts.c.id == front_id)).first()
        return None if r is None else FrontRow(**r._mapping)

    def fronts(self) -> list[FrontRow]:
        with self.engine.connect() as conn:
            return [FrontRow(**r._mapping)
                    for r in conn.execute(select(t.fronts).order_by(t.fronts.c.id))]  # fmt: skip

    def add_picks(self, front_id: int, picks: Sequence[int], user: str, now: float) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(t.picks).values(front_id=front_id, points=str(list(picks)),
                                                user=user, created=now))  # fmt: skip

    def class_changes(self, limit: int) -> list[ClassChangeRow]:
        """Containers' class changes, newest first."""
        c = t.classifications
        with self.engine.connect() as conn:
            rows = conn.execute(select(c).order_by(c.c.id.desc()).limit(limit))
            return [ClassChangeRow(**r._mapping) for r in rows]

    # --- plans and steps (the audit log) ------------------------------------------------

    def create_plan(
        self, f_current: float, f_target: float, summary: dict[str, Any],
        steps: Iterable[Step], now: float, *, state: str = "pending",
        replay: Callable[[int], str] | None = None,
    ) -> int:  # fmt: skip
        """One transaction: the plan (in ``state``), its steps, the plan's first audit
        event and its replay record (``replay(plan id)``, replay.encode), or nothing."""
        with self.engine.begin() as conn:
            r = conn.execute(
                insert(t.plans).values(
                    created=now, updated=now, state=state, f_current=f_current,
                    f_target=f_target, summary=json.dumps(summary), message="",
                )
            )  # fmt: skip
            plan = int(r.inserted_primary_key[0])  # type: ignore[index]
            rows = [
                {"plan": plan, "idx": s.index, "wave": s.wave, "container": s.move.container,
                 "source": s.move.source, "target": s.move.target, "cores": s.move.cores,
                 "memory_bytes": s.move.memory_bytes, "state": "pending", "dispatches": 0,
                 "message": "", "updated": now}
                for s in steps
            ]  # fmt: skip
            if rows:
                conn.execute(insert(t.migration_steps), rows)
            events = [{"plan": plan, "idx": None, "state": state, "message": "planned",
                       "ts": now}]  # fmt: skip
            conn.execute(insert(t.step_events), events)
            if replay is not None:
                conn.execute(insert(t.plan_replays).values(plan=plan, created=now,
                                                           doc=replay(plan)))  # fmt: skip
            pause_point("plan-insert")
            return plan

    def plan_replay(self, plan: int) -> str | None:
        """The plan's replay record as stored (JSON), None when it has none (a plan stored
        before store migration 6)."""
        q = select(t.plan_replays.c.doc).where(t.plan_replays.c.plan == plan)
        with self.engine.connect() as conn:
            doc: str | None = conn.execute(q).scalar_one_or_none()
        return doc

    def plan(self, plan: int) -> PlanRow | None:
        with self.engine.connect() as conn:
            r = conn.execute(select(t.plans).where(t.plans.c.id == plan)).first()
        if r is None:
            return None
        d = dict(r._mapping)
        d["summary"] = json.loads(d["summary"])
        return PlanRow(**d)

    def plans(self, states: Iterable[str] | None = None) -> list[PlanRow]:
        q = select(t.plans.c.id).order_by(t.plans.c.id)
        if states is not None:
            q = q.where(t.plans.c.state.in_(list(states)))
        with self.engine.connect() as conn:
            ids = list(conn.execute(q).scalars())
        return [p for p in (self.plan(i) for i in ids) if p is not None]

    def steps(self, plan: int) -> list[StoredStep]:
        q = select(t.migration_steps).where(t.migration_steps.c.plan == plan)
        with self.engine.connect() as conn:
            rows = conn.execute(q.order_by("idx")).all()
        return [
            StoredStep(plan=r.plan, state=r.state, dispatches=r.dispatches, message=r.message,
                       updated=r.updated, step=Step(r.idx, r.wave, Move(
                           r.container, r.source, r.target, r.cores, r.memory_bytes)))
            for r in rows
        ]  # fmt: skip

    def events(self, plan: int) -> list[StepEvent]:
        q = select(t.step_events).where(t.step_events.c.plan == plan).order_by("id")
        with self.engine.connect() as conn:
            return [StepEvent(**r._mapping) for r in conn.execute(q)]

    def set_step(
        self, plan: int, idx: int, state: str, message: str, now: float, *, dispatched: bool = False
    ) -> None:
        """Change a step's state and log it, in one transaction."""
        s = t.migration_steps
        values: dict[str, Any] = {"state": state, "message": message, "updated": now}
        if dispatched:
            values["dispatches"] = s.c.dispatches + 1
        with self.engine.begin() as conn:
            conn.execute(sql_update(s).where((s.c.plan == plan) & (s.c.idx == idx)).values(values))
            conn.execute(
                insert(t.step_events).values(
                    plan=plan, idx=idx, state=state, message=message, ts=now
                )
            )

    def set_plan(self, plan: int, state: str, message: str, now: float) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                sql_update(t.plans)
                .where(t.plans.c.id == plan)
                .values(state=state, message=message, updated=now)
            )
            conn.execute(
                insert(t.step_events).values(
                    plan=plan, idx=None, state=state, message=message, ts=now
                )
            )

    # --- nonces of signed requests (replay protection across restarts) -------------------

    def add_nonce(self, nonce: str, signed: float) -> bool:
        """Record a nonce before its request acts; False if it is there already."""
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(t.nonces).values(nonce=nonce, signed=signed))
        except IntegrityError:
            return False
        return True

    def nonces(self, since: float) -> list[tuple[str, float]]:
        q = select(t.nonces.c.nonce, t.nonces.c.signed).where(t.nonces.c.signed >= since)
        with self.engine.connect() as conn:
            return [(n, ts) for n, ts in conn.execute(q)]

    def drop_nonces(self, before: float) -> int:
        """Forget nonces signed before ``before``: their timestamps are refused anyway."""
        with self.engine.begin() as conn:
            return conn.execute(delete(t.nonces).where(t.nonces.c.signed < before)).rowcount

    # --- UI sessions ----------------------------------------------------------------------

    def add_session(
        self, token_sha256: str, user: str, role: str, expires: float, credential: str
    ) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(t.sessions).where(t.sessions.c.expires < time.time()))
            conn.execute(
                insert(t.sessions).values(
                    token_sha256=token_sha256, user=user, role=role, expires=expires,
                    credential=credential,
                )
            )  # fmt: skip

    def session(self, token_sha256: str, now: float) -> Session | None:
        s = t.sessions
        q = select(s.c.user, s.c.role, s.c.credential, s.c.expires).where(
            (s.c.token_sha256 == token_sha256) & (s.c.expires > now)
        )
        with self.engine.connect() as conn:
            r = conn.execute(q).first()
        return None if r is None else Session(r.user, r.role, r.credential or "", r.expires)

    def drop_session(self, token_sha256: str) -> bool:
        """End one session (logout); False if there was none."""
        with self.engine.begin() as conn:
            q = delete(t.sessions).where(t.sessions.c.token_sha256 == token_sha256)
            return bool(conn.execute(q).rowcount)
