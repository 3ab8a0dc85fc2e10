"""The store itself, on SQLite and on PostgreSQL: migrations and the nonce table."""

from __future__ import annotations

import pytest
from sqlalchemy import insert

from clavis.service import tables as t
from clavis.service.store import Store
from clavis.service.tables import MIGRATIONS, SchemaTooNewError


def test_migrations_apply_once_in_order_and_refuse_a_newer_database(store_url: str) -> None:
    store = Store(store_url, now=1000.0)
    versions = [v for v, _, _ in MIGRATIONS]
    assert store.applied == versions == sorted(versions)
    store.close()
    again = Store(store_url)
    assert again.applied == []
    with again.engine.begin() as conn:
        future = {"version": max(versions) + 1, "description": "future", "applied": 2000.0}
        conn.execute(insert(t.schema_version).values(**future))
    again.close()
    with pytest.raises(SchemaTooNewError, match="this clavisd knows up to"):
        Store(store_url)


def test_nonces_are_recorded_once_and_dropped_when_expired(store_url: str) -> None:
    store = Store(store_url)
    assert store.add_nonce("a" * 32, 100.0)
    assert not store.add_nonce("a" * 32, 100.0)  # a replay
    assert store.add_nonce("b" * 32, 200.0)
    assert sorted(store.nonces(since=150.0)) == [("b" * 32, 200.0)]
    assert store.drop_nonces(before=150.0) == 1
    assert store.nonces(since=0.0) == [("b" * 32, 200.0)]
    store.close()
