"""Builders for clavisd tests: a small cluster, a config, signed requests, reports."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.parse
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select

from clavis.service import tables as t
from clavis.service.auth import hash_password
from clavis_contracts.signing import sign

ROOT = Path(__file__).resolve().parents[3]
# A shared secret as clavis had before per-host keys: it must open nothing now.
SECRET = b"test-secret-0123456789abcdef"
ADMIN = "admin"
POWER = "power"  # Slurm's power programs' key role: /nodes/suspend and /nodes/resume only
# Per-host agent keys, an admin key and a power key, as id -> (whose: a host, ADMIN or
# POWER; secret); the keys file write_setup writes lists them all.
KEYS = {f"h{i}-k1": (f"h{i}", f"key-of-h{i}-0123456789abcdef") for i in range(1, 17)}
KEYS["admin-k1"] = (ADMIN, "admin-key-0123456789abcdef")
KEYS["power-k1"] = (POWER, "power-key-0123456789abcdef")


def key_toml(keys: dict[str, tuple[str, str]]) -> str:
    return "".join(
        f'[[keys]]\nid = "{kid}"\n'
        + (f'role = "{who}"\n' if who in (ADMIN, POWER) else f'host = "{who}"\n')
        + f'secret = "{secret}"\n'
        for kid, (who, secret) in keys.items()
    )


def write_keys(path: Path, keys: dict[str, tuple[str, str]]) -> Path:
    path.write_text(key_toml(keys))
    path.chmod(0o600)
    return path


PASSWORDS = {"ada": "admin-pass", "vic": "viewer-pass"}


def cluster_doc(hosts: int = 4, cores: int = 8) -> dict[str, Any]:
    return {
        "name": "test",
        "hosts": [
            {
                "name": f"h{i}",
                "rack": f"r{i % 2}",
                "cores": cores,
                "domains": {"count": 2, "cores_per_domain": cores // 2},
                "power": {"idle_w": 100, "peak_w": 180, "off_w": 10},
            }
            for i in range(1, hosts + 1)
        ],
    }


def write_setup(
    tmp: Path, *, hosts: int = 4, extra: str = "", port: int = 7780, store_url: str = ""
) -> Path:
    """Cluster file, agent keys file (0600), config; returns the config path. The store is
    SQLite in ``tmp`` unless ``store_url`` names another."""
    (tmp / "cluster.yaml").write_text(yaml.safe_dump(cluster_doc(hosts)))
    keys = write_keys(tmp / "agent-keys.toml", KEYS)
    users = "".join(
        f'[[users]]\nname = "{name}"\nrole = "{role}"\npassword_scrypt = "{hash_password(pw)}"\n'
        for (name, pw), role in zip(PASSWORDS.items(), ("admin", "viewer"), strict=True)
    )
    url = store_url or f"sqlite:///{tmp / 'clavis.db'}"
    cfg = tmp / "clavis.toml"
    cfg.write_text(
        f'cluster_file = "{tmp / "cluster.yaml"}"\n'
        f"{users}"
        f"[server]\nport = {port}\n"
        f'[store]\nurl = "{url}"\n'
        f'[security]\nagent_keys_file = "{keys}"\n'
        f'[advice]\npath = "{tmp / "advice.json"}"\n'
        f"{extra}"
    )
    return cfg


def container(
    name: str, job: str | None = "j1", mpki: float | None = 1.0, **kw: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "job": job,
        "cores": kw.pop("cores", 2),
        "memory_bytes": kw.pop("memory_bytes", 2**30),
        "busy_cores": kw.pop("busy_cores", 2.0),
        "intensity_mpki": mpki,
        "intensity_source": "unsupported" if mpki is None else "recorded",
        "traffic": kw.pop("traffic", []),
        **kw,
    }


def report(host: str, containers: list[dict[str, Any]], ts: float | None = None,
           watts: float | None = 150.0, busy: float = 2.0) -> dict[str, Any]:  # fmt: skip
    when = dt.datetime.fromtimestamp(ts if ts is not None else time.time(), dt.UTC)
    return {
        "host": host,
        "timestamp": when.isoformat(),
        "interval_s": 1.0,
        "busy_cores": busy,
        "power": {"watts": watts, "source": "ipmi-dcmi" if watts is not None else "none"},
        "containers": containers,
    }


def signed(
    path: str, body: bytes, method: str = "POST", now: float | None = None, by: str | None = None
) -> dict[str, str]:
    """Headers signing a request with the first key of ``by`` (a host name, ADMIN or POWER); by
    default a report is signed by its host's key (h1's when it names none) and anything
    else by the admin key."""
    who = by or (_report_host(body) if path.endswith("/reports") else ADMIN)
    kid, (_, secret) = next((k, v) for k, v in KEYS.items() if v[0] == who)
    h = sign(secret.encode(), method, path, body, time.time() if now is None else now, key_id=kid)
    h["Content-Type"] = "application/json"
    return h


def send_signed_case(client: TestClient, case: Any, body: bytes, by: str) -> Any:
    """The schemathesis signing hook: send a generated case (schemathesis.Case) with
    ``body``, the exact bytes signed with ``by``'s key (a host name, or ADMIN), the path
    signed as the server reads it (percent-decoded)."""
    path = urllib.parse.unquote(case.formatted_path)
    headers = signed(path, body, method=case.method, by=by)
    return client.request(case.method, case.formatted_path, params=case.query or None,
                          content=body, headers=headers)  # fmt: skip


def _report_host(body: bytes) -> str:
    try:  # bodies of hostile tests may be anything, nested thousands deep included
        host = json.loads(body).get("host")
    except (ValueError, AttributeError, RecursionError):
        return "h1"
    return host if isinstance(host, str) and f"{host}-k1" in KEYS else "h1"


def post_report(client: TestClient, doc: dict[str, Any]) -> Any:
    body = json.dumps(doc).encode()
    headers = signed("/api/v1/reports", body, by=doc["host"])
    return client.post("/api/v1/reports", content=body, headers=headers)


def login(client: TestClient, user: str) -> dict[str, str]:
    r = client.post("/api/v1/login", json={"user": user, "password": PASSWORDS[user]})
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


def store_rows(url: str, *, skip: tuple[str, ...] = ("nonces",)) -> dict[str, list[dict[str, Any]]]:
    """Every row of every store table but ``skip``, read without clavisd's Store (which would
    migrate); each table's rows sorted, so two reads compare equal when nothing changed."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {
                name: sorted((dict(r._mapping) for r in conn.execute(select(table))), key=repr)
                for name, table in t.meta.tables.items()
                if name not in skip
            }
    finally:
        engine.dispose()


def worked_front(cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    """A front document (`clavis pareto`'s format) of examples/worked's workload with four
    points: the three corners of (P, D, C) and one in the middle; computed for ``cluster``,
    by default the test cluster clavisd runs (``cluster_doc``), whose h1-h3 it uses."""
    worked = ROOT / "examples" / "worked"
    cluster = cluster_doc() if cluster is None else cluster
    workload = yaml.safe_load((worked / "workload.yaml").read_text())
    assignment = yaml.safe_load((worked / "current.yaml").read_text())["assignment"]
    corners = [(1, 0, 0), (0, 1, 0), (0, 0, 1), (0.6, 0.6, 0.6)]
    points = [
        {"id": i, "assignment": assignment,
         "raw": {"P": p, "D": d, "C": c, "M": 0}, "normalised": {"P": p, "D": d, "C": c, "M": 0}}
        for i, (p, d, c) in enumerate(corners)
    ]  # fmt: skip
    zero = {"P": 0, "D": 0, "C": 0, "M": 0}
    return {
        "cluster": cluster, "workload": workload, "lower": zero, "upper": zero, "points": points,
        "search": {"algorithm": "nsga2", "population": 4, "generations": 1, "seed": 0,
                   "seed_time": 0, "objectives": ["P", "D", "C"], "evaluations": 4,
                   "hypervolume": 0.5, "seconds": 0.1},
    }  # fmt: skip


def contention_reports(age: float = 30) -> list[dict[str, Any]]:
    """Reports of two devil jobs sharing h1 and h2 (devils over tolerance), h3 and h4
    idle: eight rounds, the first ``age`` seconds ago."""
    t0 = time.time() - age
    out = []
    for i in range(8):
        for host, names in (("h1", ("a1", "b1")), ("h2", ("a2", "b2"))):
            cs = [container(n, job=n[0], mpki=20.0) for n in names]
            out.append(report(host, cs, ts=t0 + i))
        for host in ("h3", "h4"):
            out.append(report(host, [], ts=t0 + i, busy=0.0))
    return out


def contended(client: TestClient) -> None:
    for doc in contention_reports():
        assert post_report(client, doc).status_code == 202


def weights_file(p: float, d: float, c: float, m: float) -> bytes:
    """A weights file as `clavis calibrate` writes it, for POST /weights."""
    return json.dumps({
        "kind": "clavis.weights", "weights": {"P": p, "D": d, "C": c, "M": m},
        "method": "thesis", "recommended": "thesis", "reason": "test", "picks": [0, 1, 2],
        "front_sha256": "0" * 64, "outcomes": [],
    }).encode()  # fmt: skip
