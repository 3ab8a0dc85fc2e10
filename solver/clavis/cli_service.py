"""`clavis repack`, `clavis plan export` and `clavis hash-password`: the head node's
command-line side of clavisd.

`clavis repack` asks the running clavisd (signed with an admin key, so it runs as
root on the head node, e.g. from the systemd timer) for one repacking pass. It never
writes the store itself: clavisd is its only writer. A dry run (the default) prints the
plan and stores nothing; ``--apply`` stores the plan and starts it.

Exit codes: 0 done (a plan printed or started, or nothing worth moving), 1 the plan could not be
started (no migrator agent answered; the plan stays pending), no solution, or with
``--apply`` a plan whose runnable moves gain too little because others are deferred
(decision ``deferred``; nothing stored), 2 bad input or clavisd unreachable.

`clavis plan export ID --out FILE` writes a stored plan's replay record (docs/clavisd.md,
"Decision replay") for `clavis solve --replay FILE`: exit 0 written, 2 refused (no such
plan, a plan stored before decision replay, clavisd unreachable; nothing written).
"""

from __future__ import annotations

import argparse
import getpass
import json
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from clavis.documents import InputError, write_json_atomic
from clavis.report import UNITS
from clavis.service import replay
from clavis.service.auth import hash_password
from clavis.service.config import DEFAULT_PATH, ConfigError, load_config
from clavis_contracts.keys import AgentKey, KeyFileError, load_keys
from clavis_contracts.signing import sign


def _plan_table(title: str, steps: list[dict[str, Any]]) -> str:
    """A plan as a table; a dry run's steps have no state (they are not stored)."""
    rows = [title, f"{'step':>4} {'wave':>4}  {'container':<20} {'from':<12} {'to':<12} "
                   f"{'cores':>5} {'memory GiB':>10}  state"]  # fmt: skip
    for s in steps:
        rows.append(f"{s['idx']:>4} {s['wave']:>4}  {s['container']:<20} {s['source']:<12} "
                    f"{s['target']:<12} {s['cores']:>5} {s['memory_bytes'] / 2**30:>10.2f}  "
                    f"{s.get('state', '-')}")  # fmt: skip
    return "\n".join(rows)


def _deferred_table(moves: list[dict[str, Any]]) -> str:
    """Moves of the solver's placement that are not run (the containers stay)."""
    rows = [f"deferred: {len(moves)} moves not run (no host has room to stage them; the "
            "containers stay where they are)",
            f"{'':>9}  {'container':<20} {'from':<12} {'to':<12} {'cores':>5} "
            f"{'memory GiB':>10}"]  # fmt: skip
    for m in moves:
        rows.append(f"{'':>9}  {m['container']:<20} {m['source']:<12} {m['target']:<12} "
                    f"{m['cores']:>5} {m['memory_bytes'] / 2**30:>10.2f}")  # fmt: skip
    return "\n".join(rows)


def _f_line(doc: dict[str, Any]) -> str:
    """F before and after the steps, and the solver's F when deferred moves differ."""
    line = f"F {doc['f_current']:.6f} -> {doc['f_target']:.6f}"
    solver = doc.get("f_solver", doc.get("summary", {}).get("f_solver"))
    if doc.get("deferred") and solver is not None:
        line += f" (the solver's placement, with the deferred moves: {solver:.6f})"
    return line


def _objectives_line(doc: dict[str, Any]) -> str | None:
    """Raw P, D, C and M before and after the plan's steps (docs/objectives.md units)."""
    o = doc.get("summary", {}).get("objectives")
    if not isinstance(o, dict) or "before" not in o or "after" not in o:
        return None
    line = "objectives " + ", ".join(
        f"{k} {o['before'][k]:.6g} -> {o['after'][k]:.6g} {UNITS[k]}" for k in "PDCM"
    )
    solver = o.get("solver")
    if isinstance(solver, dict) and solver != o["after"]:
        line += (
            "\n(the solver's placement, with the deferred moves: "
            + ", ".join(f"{k} {solver[k]:.6g}" for k in "PDCM")
            + ")"
        )
    return line


@dataclass(frozen=True)
class _Clavisd:
    """Where the running clavisd listens, and the admin key its requests are signed with."""

    url: str
    key: AgentKey = field(repr=False)
    verify: ssl.SSLContext | bool
    timeout: float

    def call(self, method: str, path: str, body: bytes = b"") -> httpx.Response:
        headers = {**sign(self.key.secret_bytes, method, path, body, time.time(),
                          key_id=self.key.id), "Content-Type": "application/json"}  # fmt: skip
        try:
            r = httpx.request(method, self.url + path, content=body, headers=headers,
                              timeout=self.timeout, verify=self.verify)  # fmt: skip
        except httpx.HTTPError as exc:
            raise InputError(f"clavisd at {self.url} did not answer: {exc}") from exc
        if r.status_code != 200:
            raise InputError(f"clavisd refused the request ({r.status_code}): {r.text[:500]}")
        return r


def _clavisd(args: argparse.Namespace) -> _Clavisd:
    try:
        config = load_config(Path(args.config))
        keys_file = Path(args.keys_file) if args.keys_file else config.security.agent_keys_file
        key = next((k for k in load_keys(keys_file) if k.role == "admin"), None)
    except (ConfigError, KeyFileError) as exc:
        raise InputError(str(exc)) from exc
    if key is None:  # host keys cannot repack (clavisd would answer 403)
        raise InputError(f'{keys_file}: no admin key (role = "admin") to sign the request')
    srv = config.server
    url = args.url or f"{srv.scheme}://{srv.listen}:{srv.port}"
    # HTTPS: trust the CA file given, else the server's own (self-signed) certificate,
    # else the system's CAs (docs/clavisd.md, TLS)
    ca = args.ca_file or (str(srv.tls_cert_file) if srv.tls_cert_file else None)
    verify = ssl.create_default_context(cafile=ca) if ca else True
    return _Clavisd(url, key, verify, args.timeout)


def _out_path(value: str | None, flag: str) -> Path | None:
    out = Path(value) if value else None
    if out is not None and not out.resolve().parent.is_dir():
        raise InputError(f"{flag}: directory {out.resolve().parent} does not exist")
    if out is not None and out.suffix.lower() != ".json":
        raise InputError(f"{flag}: {out} must end in .json (a replay record is JSON)")
    return out


def _write_record(out: Path, text: str, source: str, plan: int | None) -> None:
    """Write a replay record after validating it (replay.decode), and only if it is the
    record of ``plan``."""
    record = replay.decode(text, source)
    if record.plan != plan:
        raise InputError(f"{source}: plan: {record.plan}, expected {plan}")
    write_json_atomic(out, json.loads(text))
    print(f"wrote {out} (replay record; `clavis solve --replay {out}`)")


def cmd_repack(args: argparse.Namespace) -> int:
    replay_out = _out_path(args.replay_out, "--replay-out")
    server = _clavisd(args)
    body = json.dumps({"apply": bool(args.apply)}).encode()
    r = server.call("POST", "/api/v1/repack", body)
    out = r.json()
    print(f"decision: {out['decision']}  {out['message']}")
    proposal, plan = out.get("proposal"), out.get("plan")
    if proposal is not None:
        deferred = out["decision"] == "deferred"
        title = "plan (not stored: too little can run)" if deferred else "dry-run plan (not stored)"
        print(_plan_table(f"{title}  {_f_line(proposal)}", proposal["steps"]))
        line = _objectives_line(proposal)
        if line:
            print(line)
        if proposal["deferred"]:
            print(_deferred_table(proposal["deferred"]))
        if replay_out is not None:
            record = json.dumps(proposal["summary"]["replay"])
            _write_record(replay_out, record, "the proposal's summary.replay", None)
        if deferred:
            print("nothing stored, nothing moved: the moves that can run gain too little")
            return 1 if args.apply else 0
        print("dry run: nothing stored, nothing moved (`clavis repack --apply` plans again "
              "and starts the plan)")  # fmt: skip
        return 0
    if plan is None:
        return 1 if out["decision"] == "no-solution" else 0
    print(_plan_table(f"plan {plan['id']}  state {plan['state']}  {_f_line(plan)}",
                      plan["steps"]))  # fmt: skip
    line = _objectives_line(plan)
    if line:
        print(line)
    if plan["deferred"]:
        print(_deferred_table(plan["deferred"]))
    if replay_out is not None:
        path = f"/api/v1/plans/{plan['id']}/replay"
        _write_record(replay_out, server.call("GET", path).text, path, plan["id"])
    if plan["state"] == "pending":
        print(f"clavis: error: plan {plan['id']} not started: {plan['message']}", file=sys.stderr)
        return 1
    return 0


def cmd_plan_export(args: argparse.Namespace) -> int:
    """A stored plan's replay record into a file (GET /api/v1/plans/{id}/replay)."""
    if args.plan < 1:
        raise InputError(f"plan id must be positive, got {args.plan}")
    out = _out_path(args.out, "--out")
    assert out is not None
    path = f"/api/v1/plans/{args.plan}/replay"
    _write_record(out, _clavisd(args).call("GET", path).text, path, args.plan)
    return 0


def cmd_hash_password(args: argparse.Namespace) -> int:
    password = sys.stdin.readline().rstrip("\n") if args.stdin else getpass.getpass()
    if len(password) < 8:
        raise InputError("password must have at least 8 characters")
    print(hash_password(password))
    return 0


def _connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=str(DEFAULT_PATH), help=f"default {DEFAULT_PATH}")
    p.add_argument(
        "--keys-file", help="signed with its first admin key; default: security.agent_keys_file"
    )
    p.add_argument("--url", help="clavisd base URL (default: server.listen/port of the config)")
    p.add_argument(
        "--ca-file", help="CA certificate(s) for HTTPS; default: server.tls_cert_file if set"
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds (default 300)")


def add_parsers(sub: Any) -> None:
    r = sub.add_parser("repack", help="one repacking pass of the running clavisd")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run", action="store_true", help="compute and print the plan, store nothing (default)"
    )
    mode.add_argument("--apply", action="store_true", help="store the plan and start it")
    r.add_argument(
        "--replay-out",
        metavar="FILE",
        help="write the plan's replay record (for `clavis solve --replay`) to FILE (.json)",
    )
    _connection_args(r)
    r.set_defaults(func=cmd_repack)
    plan = sub.add_parser("plan", help="a stored plan of the running clavisd")
    plan_sub = plan.add_subparsers(dest="plan_command", required=True)
    e = plan_sub.add_parser(
        "export", help="write a plan's replay record (for `clavis solve --replay`)"
    )
    e.add_argument("plan", type=int, help="the plan's id (GET /api/v1/plans)")
    e.add_argument("--out", required=True, metavar="FILE", help="the record's file (.json)")
    _connection_args(e)
    e.set_defaults(func=cmd_plan_export)
    h = sub.add_parser("hash-password", help="scrypt hash of a UI password for clavis.toml")
    h.add_argument("--stdin", action="store_true", help="read the password from stdin")
    h.set_defaults(func=cmd_hash_password)
