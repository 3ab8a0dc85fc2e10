"""`clavis repack` and `clavis hash-password`: the head node's command-line side of clavisd.

`clavis repack` asks the running clavisd (signed with the shared secret, so it runs as
root on the head node, e.g. from the systemd timer) for one repacking pass. It never
writes the store itself: clavisd is its only writer. A dry run (the default) prints the
plan and stores nothing; ``--apply`` stores the plan and starts it.

Exit codes: 0 done (a plan printed or started, or nothing worth moving), 1 the plan could not be
started (no migrator agent answered; the plan stays pending) or no solution, 2 bad
input or clavisd unreachable.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from clavis.documents import InputError
from clavis.service.auth import SecretFileError, hash_password, load_secret
from clavis.service.config import DEFAULT_PATH, ConfigError, load_config
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


def cmd_repack(args: argparse.Namespace) -> int:
    try:
        config = load_config(Path(args.config))
        secret = load_secret(Path(args.secret_file) if args.secret_file else
                             config.security.secret_file)  # fmt: skip
    except (ConfigError, SecretFileError) as exc:
        raise InputError(str(exc)) from exc
    url = args.url or f"http://{config.server.listen}:{config.server.port}"
    path = "/api/v1/repack"
    body = json.dumps({"apply": bool(args.apply)}).encode()
    headers = {**sign(secret, "POST", path, body, time.time()), "Content-Type": "application/json"}
    try:
        r = httpx.post(url + path, content=body, headers=headers, timeout=args.timeout)
    except httpx.HTTPError as exc:
        raise InputError(f"clavisd at {url} did not answer: {exc}") from exc
    if r.status_code != 200:
        raise InputError(f"clavisd refused the request ({r.status_code}): {r.text[:500]}")
    out = r.json()
    print(f"decision: {out['decision']}  {out['message']}")
    proposal, plan = out.get("proposal"), out.get("plan")
    if proposal is not None:
        print(_plan_table(f"dry-run plan (not stored)  F {proposal['f_current']:.6f} -> "
                          f"{proposal['f_target']:.6f}", proposal["steps"]))  # fmt: skip
        print("dry run: nothing stored, nothing moved (`clavis repack --apply` plans again "
              "and starts the plan)")  # fmt: skip
        return 0
    if plan is None:
        return 1 if out["decision"] == "no-solution" else 0
    print(_plan_table(f"plan {plan['id']}  state {plan['state']}  F {plan['f_current']:.6f} "
                      f"-> {plan['f_target']:.6f}", plan["steps"]))  # fmt: skip
    if plan["state"] == "pending":
        print(f"clavis: error: plan {plan['id']} not started: {plan['message']}", file=sys.stderr)
        return 1
    return 0


def cmd_hash_password(args: argparse.Namespace) -> int:
    password = sys.stdin.readline().rstrip("\n") if args.stdin else getpass.getpass()
    if len(password) < 8:
        raise InputError("password must have at least 8 characters")
    print(hash_password(password))
    return 0


def add_parsers(sub: Any) -> None:
    r = sub.add_parser("repack", help="one repacking pass of the running clavisd")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run", action="store_true", help="compute and print the plan, store nothing (default)"
    )
    mode.add_argument("--apply", action="store_true", help="store the plan and start it")
    r.add_argument("--config", default=str(DEFAULT_PATH), help=f"default {DEFAULT_PATH}")
    r.add_argument("--secret-file", help="default: security.secret_file of the config")
    r.add_argument("--url", help="clavisd base URL (default: server.listen/port of the config)")
    r.add_argument("--timeout", type=float, default=300.0, help="seconds (default 300)")
    r.set_defaults(func=cmd_repack)
    h = sub.add_parser("hash-password", help="scrypt hash of a UI password for clavis.toml")
    h.add_argument("--stdin", action="store_true", help="read the password from stdin")
    h.set_defaults(func=cmd_hash_password)
