"""The store's tables and their numbered migrations (portable SQLAlchemy Core).

Times are unix seconds (float) so the same SQL runs on SQLite and PostgreSQL. A
migration is applied once, in order, inside one transaction with its version row; a
database newer than this code is refused rather than guessed at.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    select,
    text,
)

meta = MetaData()
_NAME = 128

schema_version = Table(
    "schema_version", meta,
    Column("version", Integer, primary_key=True),
    Column("description", String(200), nullable=False),
    Column("applied", Float, nullable=False),
)  # fmt: skip

hosts = Table(
    "hosts", meta,
    Column("name", String(_NAME), primary_key=True),
    Column("rack", String(_NAME), nullable=False),
    Column("cores", Integer, nullable=False),
    Column("last_report", Float),  # timestamp of the newest accepted report
    Column("busy_cores", Float),
    Column("watts", Float),
)  # fmt: skip

# A container is a Slurm node. ``votes`` is the DINO hysteresis window, newest last,
# one character per sample ("d" devil, "t" turtle), kept so a restart loses nothing.
containers = Table(
    "containers", meta,
    Column("name", String(_NAME), primary_key=True),
    Column("host", String(_NAME), nullable=False),
    Column("job", String(_NAME)),
    Column("app", String(256)),
    Column("cores", Integer, nullable=False),
    Column("memory_bytes", BigInteger, nullable=False),
    Column("busy_cores", Float, nullable=False),
    Column("intensity_mpki", Float),
    Column("klass", String(8)),
    Column("class_source", String(16), nullable=False),
    Column("votes", String(1000), nullable=False),
    Column("traffic", Text, nullable=False),  # JSON {peer: bytes/s} of the newest sample
    Column("updated", Float, nullable=False),
    # The user's --clavis-class of the job now in it (devil/turtle), null for none
    # (migration 3): it overrides ``klass`` where a class is used, never the votes.
    Column("class_hint", String(8)),
)  # fmt: skip

jobs = Table(
    "jobs", meta,
    Column("name", String(_NAME), primary_key=True),
    Column("app", String(256), nullable=False),
    Column("klass", String(8)),
    Column("updated", Float, nullable=False),
)  # fmt: skip

# ReSense's idea (Dey et al. 2013, §2.2): a precomputed class per application, so a job
# of a known application is classified before its first sample.
app_classes = Table(
    "app_classes", meta,
    Column("app", String(256), primary_key=True),
    Column("klass", String(8), nullable=False),
    Column("jobs_seen", Integer, nullable=False),
    Column("updated", Float, nullable=False),
)  # fmt: skip

host_samples = Table(
    "host_samples", meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("host", String(_NAME), nullable=False),
    Column("ts", Float, nullable=False),
    Column("resolution_s", Float, nullable=False),
    Column("busy_cores", Float, nullable=False),
    Column("watts", Float),
    Column("power_source", String(16), nullable=False),
)  # fmt: skip
Index("host_samples_host_ts", host_samples.c.host, host_samples.c.ts)

# Traffic is one JSON column per sample rather than one row per peer: a report of 8
# containers with 8 peers each would otherwise cost 64 rows, and only sums are read back.
container_samples = Table(
    "container_samples", meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("container", String(_NAME), nullable=False),
    Column("host", String(_NAME), nullable=False),
    Column("job", String(_NAME)),
    Column("ts", Float, nullable=False),
    Column("resolution_s", Float, nullable=False),
    Column("busy_cores", Float, nullable=False),
    Column("intensity_mpki", Float),
    Column("intensity_source", String(16), nullable=False),
    Column("traffic", Text, nullable=False),
)  # fmt: skip
Index("container_samples_ts", container_samples.c.ts)

classifications = Table(
    "classifications", meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("container", String(_NAME), nullable=False),
    Column("job", String(_NAME)),
    Column("klass", String(8), nullable=False),
    Column("source", String(16), nullable=False),
    Column("ts", Float, nullable=False),
)  # fmt: skip

power_models = Table(
    "power_models", meta,
    Column("host", String(_NAME), primary_key=True),
    Column("idle_w", Float, nullable=False),
    Column("slope_w", Float, nullable=False),
    Column("r2", Float, nullable=False),
    Column("rmse_w", Float, nullable=False),
    Column("samples", Integer, nullable=False),
    Column("fitted", Float, nullable=False),
)  # fmt: skip

fronts = Table(
    "fronts", meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created", Float, nullable=False),
    Column("doc", Text, nullable=False),
)  # fmt: skip

picks = Table(
    "picks", meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("front_id", Integer, nullable=False),
    Column("points", Text, nullable=False),
    Column("user", String(64), nullable=False),
    Column("created", Float, nullable=False),
)  # fmt: skip

weights = Table(
    "weights", meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created", Float, nullable=False),
    Column("user", String(64), nullable=False),
    Column("doc", Text, nullable=False),  # a WeightsFile (clavis.model)
)  # fmt: skip

plans = Table(
    "plans", meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created", Float, nullable=False),
    Column("updated", Float, nullable=False),
    Column("state", String(16), nullable=False),
    Column("f_current", Float, nullable=False),
    Column("f_target", Float, nullable=False),
    Column("summary", Text, nullable=False),
    Column("message", Text, nullable=False),
)  # fmt: skip

migration_steps = Table(
    "migration_steps", meta,
    Column("plan", Integer, primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("wave", Integer, nullable=False),
    Column("container", String(_NAME), nullable=False),
    Column("source", String(_NAME), nullable=False),
    Column("target", String(_NAME), nullable=False),
    Column("cores", Integer, nullable=False),
    Column("memory_bytes", BigInteger, nullable=False),
    Column("state", String(16), nullable=False),
    Column("dispatches", Integer, nullable=False),
    Column("message", Text, nullable=False),
    Column("updated", Float, nullable=False),
)  # fmt: skip

# The audit log: every state a step or plan went through, never updated or deleted.
step_events = Table(
    "step_events", meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("plan", Integer, nullable=False),
    Column("idx", Integer),  # null: an event of the whole plan
    Column("state", String(16), nullable=False),
    Column("message", Text, nullable=False),
    Column("ts", Float, nullable=False),
)  # fmt: skip

sessions = Table(
    "sessions", meta,
    Column("token_sha256", String(64), primary_key=True),
    Column("user", String(64), nullable=False),
    Column("role", String(8), nullable=False),
    Column("expires", Float, nullable=False),
    # What the session was granted from (auth.credential); null in stores before migration
    # 4, so those sessions no longer authenticate.
    Column("credential", String(64)),
)  # fmt: skip

V1_TABLES: Final = [t for t in meta.sorted_tables if t is not schema_version]

# The host power audit log (hostpower.py): every BMC action and its result, never updated.
power_events = Table(
    "power_events", meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("host", String(_NAME), nullable=False),
    Column("action", String(16), nullable=False),  # status, soft, off, on
    Column("result", String(16), nullable=False),  # sent, ok, failed, timeout, unknown; on/off
    Column("message", Text, nullable=False),
    Column("ts", Float, nullable=False),
)  # fmt: skip
Index("power_events_host", power_events.c.host, power_events.c.id)

# Nonces of accepted signed requests, kept while their signature time is within the
# allowed skew (after that the timestamp alone refuses a replay): a restarted clavisd
# reloads them, so a request it accepted before the restart cannot be replayed after.
nonces = Table(
    "nonces", meta,
    Column("nonce", String(64), primary_key=True),
    Column("signed", Float, nullable=False),  # the request's signature timestamp
)  # fmt: skip
Index("nonces_signed", nonces.c.signed)

# Decision replay (replay.py): the exact solver documents, weights and options a plan was
# made from, and the solver's answer, as one versioned JSON record per plan, written in the
# transaction that stores the plan. Plans stored before migration 6 have none.
plan_replays = Table(
    "plan_replays", meta,
    Column("plan", Integer, primary_key=True),
    Column("created", Float, nullable=False),
    Column("doc", Text, nullable=False),  # a ReplayRecord (replay.py), schema_version inside
)  # fmt: skip


def _v1(conn: Connection) -> None:
    meta.create_all(conn, tables=V1_TABLES)


def _v2(conn: Connection) -> None:
    meta.create_all(conn, tables=[nonces])


def _v3(conn: Connection) -> None:
    # A store made by migration 1 of this code has the column already (create_all uses
    # today's definition); one made by an older clavisd gets it here.
    if "class_hint" not in {c["name"] for c in inspect(conn).get_columns("containers")}:
        conn.execute(text("ALTER TABLE containers ADD COLUMN class_hint VARCHAR(8)"))


def _v4(conn: Connection) -> None:
    if "credential" not in {c["name"] for c in inspect(conn).get_columns("sessions")}:
        conn.execute(text("ALTER TABLE sessions ADD COLUMN credential VARCHAR(64)"))


def _v5(conn: Connection) -> None:
    meta.create_all(conn, tables=[power_events])


def _v6(conn: Connection) -> None:
    meta.create_all(conn, tables=[plan_replays])


Migration = tuple[int, str, Callable[[Connection], None]]
MIGRATIONS: Final[list[Migration]] = [
    (1, "hosts, containers, jobs, samples, classes, power models, fronts, weights, plans", _v1),
    (2, "nonces of signed requests, so replay protection survives a restart", _v2),
    (3, "containers.class_hint: the user's --clavis-class, reported from schema 2 on", _v3),
    (4, "sessions.credential: a session ends when its user's role or password changes", _v4),
    (5, "power_events: the audit log of BMC power actions (host power)", _v5),
    (6, "plan_replays: the solver inputs and options of each plan (decision replay)", _v6),
]


class SchemaTooNewError(Exception):
    """The database was migrated by a newer clavisd."""


def migrate(conn: Connection, now: float) -> list[int]:
    """Apply the migrations the database lacks; return the versions applied."""
    meta.create_all(conn, tables=[schema_version])
    have = set(conn.execute(select(schema_version.c.version)).scalars())
    known = {v for v, _, _ in MIGRATIONS}
    if have - known:
        raise SchemaTooNewError(
            f"database has schema version {max(have)}, this clavisd knows up to {max(known)}"
        )
    applied = []
    for version, description, step in MIGRATIONS:
        if version in have:
            continue
        step(conn)
        conn.execute(
            schema_version.insert().values(version=version, description=description, applied=now)
        )
        applied.append(version)
    return applied
