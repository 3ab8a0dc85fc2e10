"""Issue 15's items 1 and 3-10 tried against a real clavisd (item 2 is the outage phase,
outage.py). Each row keeps the issue's words for "before" and what this run measured for
"after"; a row passes only when every check in it held."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from chaos.clavisd import ADMIN_KEY, PASSWORDS, Clavisd, container, host_key, users_toml, wait_for

from clavis_contracts.advice import AdviceFile

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Row:
    item: int
    what: str
    before: str
    after: str = ""
    checks: list[tuple[str, bool]] = field(default_factory=list)

    def check(self, name: str, ok: bool) -> bool:
        self.checks.append((name, ok))
        return ok

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(ok for _, ok in self.checks)

    def as_json(self) -> dict[str, Any]:
        return {"item": self.item, "what": self.what, "before": self.before,
                "after": self.after, "ok": self.ok,
                "checks": [{"check": n, "ok": ok} for n, ok in self.checks]}  # fmt: skip


def item1(d: Clavisd) -> Row:
    row = Row(1, "container larger than its host; containers a host stops listing",
              "a report listing a 65,536-core container on an 8-core host made every later "
              "repack `no-solution` and every advice node `unknown`, for good, nothing "
              "logged; containers a host stopped reporting were never removed")  # fmt: skip
    big = d.report(1, [container("c1-big", cores=65536)])
    row.check("65,536-core container refused with 422", big.status_code == 422)
    ok = [d.report(h, [container(f"c{h}-a"), container(f"c{h}-b")]) for h in (1, 2, 3)]
    row.check("sane reports accepted", all(r.status_code == 202 for r in ok))
    gone = d.report(2, [container("c2-a")])
    names = {c["name"] for c in d.admin("GET", "/containers").json()}
    row.check(
        "c2-b removed when h2 stopped listing it",
        gone.status_code == 202 and "c2-b" not in names and "c2-a" in names,
    )
    rep = d.admin("POST", "/repack", {"apply": False})
    decision = rep.json().get("decision") if rep.status_code == 200 else f"HTTP {rep.status_code}"
    row.check("a later dry-run repack has a solution", decision != "no-solution"
              and rep.status_code == 200)  # fmt: skip
    row.after = (
        f"oversized report: {big.status_code}; later dry-run repack: `{decision}`; "
        f"container h2 stopped listing: {'kept' if 'c2-b' in names else 'removed'}"
    )
    return row


def item3(tmp: Path) -> Row:
    row = Row(3, "a failed advice write and the other periodic tasks",
              "a failed advice write (e.g. unwritable path) skipped nonce pruning, retention "
              "and the internal repack on every pass: one `try` covered all four")  # fmt: skip
    (tmp / "advice-is-a-dir").mkdir()
    (tmp / "advice-is-a-dir" / "keep").write_text("x")  # a rename onto it fails
    d = Clavisd(tmp, hosts=4, security="max_skew_s = 2\n", extra=(
        f'[advice]\npath = "{tmp / "advice-is-a-dir"}"\nvalid_s = 30\n'
        "[repack]\ninterval_s = 3\ntime_limit_s = 1\n"
        "[retention]\nraw_s = 600\nkeep_s = 1200\n"
    ))  # fmt: skip
    try:
        d.start()
        old = time.time() - 7200  # older than keep_s: the first retention pass drops it
        r_old = d.report(1, [], ts=old)
        d.report(2, [container("c2-a")])
        d.admin("GET", "/hosts")  # a signed request leaves a nonce
        nonces0 = d.query("select count(*) from nonces")[0][0]
        old0 = d.query("select count(*) from host_samples where ts < ?", old + 1)[0][0]
        wait_for(
            lambda: "repack decision=" in d.tail(200000) and "task=advice failed" in d.tail(200000),
            30,
            "repack and advice passes",
        )
        wait_for(lambda: d.query("select count(*) from nonces")[0][0] == 0, 30, "nonce pruning")
        nonces1 = d.query("select count(*) from nonces")[0][0]
        old1 = d.query("select count(*) from host_samples where ts < ?", old + 1)[0][0]
    except TimeoutError as exc:
        row.check(str(exc), False)
        row.after = f"timed out: {exc}"
        return row
    finally:
        d.stop()
    log = d.tail(200000)
    fails = log.count("task=advice failed")
    row.check("advice write failed and was logged", fails > 0)
    row.check("nonces pruned meanwhile", nonces0 > 0 and nonces1 == 0)
    row.check("retention dropped a 2 h old sample", r_old.status_code == 202 and old0 == 1
              and old1 == 0)  # fmt: skip
    row.check("internal repack ran", "repack decision=" in log)
    row.after = (
        f"advice failed {fails} times (logged `task=advice failed`); meanwhile nonces "
        f"{nonces0} -> {nonces1}, a 2 h old sample {old0} -> {old1} (retention), "
        f"repack passes {log.count('repack decision=')}"
    )
    return row


def item4(tmp: Path) -> Row:
    row = Row(4, "sessions: logout, demotion, password change, restart",
              "sessions kept their role for 8 h through user removal, demotion, password "
              "change and restart; there was no logout")  # fmt: skip
    d = Clavisd(tmp, hosts=4)
    try:
        d.start()
        tok = {u: d.login(u, p).json()["token"] for u, p in PASSWORDS.items()}
        out = d.login("ada", PASSWORDS["ada"]).json()["token"]
        me = d.request("GET", "/me", token=out).status_code
        bye = d.request("POST", "/logout", token=out).status_code
        after_logout = d.request("GET", "/me", token=out).status_code
        row.check("logout ends the session", me == 200 and bye == 204 and after_logout == 401)
        # demote ada, change vic's password, restart
        d.stop()
        d.write_config(
            users=users_toml(
                {"ada": "viewer", "vic": "viewer"},
                {"ada": PASSWORDS["ada"], "vic": "vic-password-2"},
            )
        )
        d.start()
        demoted = d.request("GET", "/me", token=tok["ada"]).status_code
        changed = d.request("GET", "/me", token=tok["vic"]).status_code
        relog = d.login("ada", PASSWORDS["ada"]).json().get("role")
        row.check("demoted admin's session refused", demoted == 401)
        row.check("session refused after password change", changed == 401)
        row.check("new login gets the new role", relog == "viewer")
    finally:
        d.stop()
    row.after = (
        f"after logout {after_logout}; after restart: demoted admin {demoted}, "
        f"password changed {changed}; ada logs in again as `{relog}`"
    )
    return row


def item5(d: Clavisd) -> Row:
    row = Row(5, "agent keys: admin endpoints, another host's reports",
              "the shared agent secret was also an admin key: root on any compute host could "
              "forge any host's reports, take over another host's container names, and post "
              "weights or apply plans")  # fmt: skip
    k1 = host_key(1)
    codes = {
        "POST /repack": d.request("POST", "/repack", {"apply": True}, key=k1).status_code,
        "POST /weights": d.request("POST", "/weights", {}, key=k1).status_code,
        "GET /hosts": d.request("GET", "/hosts", key=k1).status_code,
        "POST /plans/1/apply": d.request("POST", "/plans/1/apply", key=k1).status_code,
    }
    forged = d.report(4, [container("c4-a")], key=k1).status_code
    d.report(3, [container("c3-a"), container("c3-b")])
    takeover = d.report(4, [container("c3-a")]).status_code
    row.check("agent key refused on admin/viewer endpoints", all(c == 403 for c in codes.values()))
    row.check("h1's key refused for h4's report", forged == 403)
    row.check("h4 may not claim h3's fresh container", takeover == 409)
    row.after = (", ".join(f"{k} {v}" for k, v in codes.items())
                 + f" with h1's key; h4's report signed by h1: {forged}; h4 listing h3's "
                 f"container: {takeover}")  # fmt: skip
    return row


def _raw(port: int, data: bytes, wait_s: float) -> tuple[bytes, float]:
    """Send ``data`` and read until the server closes or ``wait_s``: (answer, seconds)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        s.sendall(data)
        got = b""
        try:  # bounded: every recv waits at most wait_s, and the whole at most 2 wait_s
            while time.monotonic() - t0 < 2 * wait_s and (chunk := s.recv(65536)):
                got += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return got, time.monotonic() - t0


def _status(answer: bytes) -> str:
    return answer.split(b"\r\n", 1)[0].decode(errors="replace")[9:12] or "closed"


def item6(tmp: Path) -> Row:
    row = Row(6, "request limits, slow requests, login rate limit, listen address",
              "only /reports bounded its body: /login and any signed request read 100 MB "
              "before refusing; slow or partial requests stayed open indefinitely; no login "
              "rate limit; the sample config listened on 0.0.0.0 over plain HTTP")  # fmt: skip
    d = Clavisd(tmp, hosts=4, server="request_timeout_s = 2\nheader_timeout_s = 2\n")
    try:
        d.start()
        big = b"POST /api/v1/login HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n"
        login_big, _ = _raw(d.port, big + b"{" * 65536, 10)
        sig = b"POST /api/v1/weights HTTP/1.1\r\nHost: x\r\nX-Clavis-Key-Id: h1-k1\r\n" \
              b"Content-Length: 100000000\r\n\r\n"  # fmt: skip
        signed_big, _ = _raw(d.port, sig + b"{" * 65536, 10)
        _, t_head = _raw(d.port, b"GET /api/v1/health HTTP/1.1\r\nHo", 15)
        slow_body, t_body = _raw(d.port, b"POST /api/v1/login HTTP/1.1\r\nHost: x\r\n"
                                 b"Content-Length: 100\r\n\r\n{\"us", 15)  # fmt: skip
        tries = [d.login("ada", f"wrong-{i}") for i in range(7)]
        codes = [r.status_code for r in tries]
        retry = tries[-1].headers.get("retry-after", "")
    finally:
        d.stop()
    sample = (ROOT / "deploy" / "config" / "clavis.toml.sample").read_text()
    listen = next(line for line in sample.splitlines() if line.startswith("listen"))
    row.check("/login 100 MB declared: 413", _status(login_big) == "413")
    row.check("signed 100 MB declared: 413", _status(signed_big) == "413")
    row.check("partial headers closed within 2 s + 1", t_head < 3.0)
    row.check("partial body: 408 within 2 s + 1", _status(slow_body) == "408" and t_body < 3.0)
    row.check(
        "7 bad logins: 401 x5 then 429 with Retry-After",
        codes[:5] == [401] * 5 and codes[5:] == [429, 429] and retry != "",
    )
    row.check("sample config listens on loopback", "127.0.0.1" in listen)
    row.after = (f"100 MB /login {_status(login_big)}, signed {_status(signed_big)}; partial "
                 f"headers closed after {t_head:.1f} s, partial body {_status(slow_body)} after "
                 f"{t_body:.1f} s (timeouts 2 s); bad logins {codes} (Retry-After {retry} s); "
                 f"sample `{listen.strip()}`")  # fmt: skip
    return row


def item7(d: Clavisd, marker: str) -> Row:
    row = Row(7, "NaN, Infinity, 1e999",
              "NaN, Infinity or 1e999 in /login (unauthenticated), /repack or /picks gave a "
              "500 with a traceback that included the raw body")  # fmt: skip
    bodies = [f'{{"user": "{marker}", "password": {v}}}' for v in ("NaN", "Infinity", "1e999")]
    codes = [d.request("POST", "/login", raw=b.encode()).status_code for b in bodies]
    for v in ("NaN", "-Infinity", "1e999"):
        raw = f'{{"apply": {v}, "note": "{marker}"}}'.encode()
        codes.append(d.request("POST", "/repack", raw=raw, key=ADMIN_KEY).status_code)
        raw = f'{{"picks": [0, 1, {v}], "method": "{marker}"}}'.encode()
        codes.append(d.request("POST", "/fronts/1/picks", raw=raw, key=ADMIN_KEY).status_code)
    time.sleep(0.5)
    log = d.tail(10**7)
    row.check("every answer 4xx", all(400 <= c < 500 for c in codes))
    row.check("no traceback in the log", "Traceback" not in log)
    row.check("no raw body in the log", marker not in log)
    row.after = (
        f"{len(codes)} requests: statuses {sorted(set(codes))}; tracebacks in the log "
        f"{log.count('Traceback')}; raw body in the log {log.count(marker)} times"
    )
    return row


def item8(d: Clavisd) -> Row:
    row = Row(8, "strict types",
              '"strict" models coerced (`cores: true` -> 1, `"2"` -> 2); `"2.0"` passed '
              "validation, then failed in the writer as a 503 the monitor retried until the "
              "report aged out")  # fmt: skip
    codes = {repr(v): d.report(2, [container("c2-a", cores=v)]).status_code
             for v in (True, "2", "2.0")}  # fmt: skip
    row.check("each refused with 422", all(c == 422 for c in codes.values()))
    repack = d.request("POST", "/repack", raw=b'{"apply": "true"}', key=ADMIN_KEY).status_code
    row.check('{"apply": "true"} refused with 422', repack == 422)
    row.after = (
        ", ".join(f"cores {k}: {v}" for k, v in codes.items())
        + f'; /repack {{"apply": "true"}}: {repack}'
    )
    return row


def item9(d: Clavisd, cluster: dict[str, Any]) -> Row:
    row = Row(
        9,
        "a front for another cluster",
        "POST /fronts accepted a front computed for another cluster",
    )
    worked = ROOT / "examples" / "worked"
    other = yaml.safe_load((worked / "cluster.yaml").read_text())
    assignment = yaml.safe_load((worked / "current.yaml").read_text())["assignment"]
    corners = [(1, 0, 0), (0, 1, 0), (0, 0, 1), (0.6, 0.6, 0.6)]
    front = {
        "workload": yaml.safe_load((worked / "workload.yaml").read_text()),
        "lower": {"P": 0, "D": 0, "C": 0, "M": 0}, "upper": {"P": 0, "D": 0, "C": 0, "M": 0},
        "points": [{"id": i, "assignment": assignment, "raw": {"P": p, "D": q, "C": c, "M": 0},
                    "normalised": {"P": p, "D": q, "C": c, "M": 0}}
                   for i, (p, q, c) in enumerate(corners)],
        "search": {"algorithm": "nsga2", "population": 4, "generations": 1, "seed": 0,
                   "seed_time": 0, "objectives": ["P", "D", "C"], "evaluations": 4,
                   "hypervolume": 0.5, "seconds": 0.1},
    }  # fmt: skip
    theirs = d.admin("POST", "/fronts", {**front, "cluster": other})
    renamed = d.admin("POST", "/fronts", {**front, "cluster": {**cluster, "name": "elsewhere"}})
    ours = d.admin("POST", "/fronts", {**front, "cluster": cluster})
    row.check("examples/worked's front refused with 422", theirs.status_code == 422)
    row.check("a renamed copy of this cluster refused", renamed.status_code == 422)
    row.check("this cluster's front stored", ours.status_code == 200)
    detail = str(theirs.json().get("detail", ""))[:70]
    row.after = (
        f"front of `worked`: {theirs.status_code} ({detail}…); renamed cluster: "
        f"{renamed.status_code}; this cluster's: {ours.status_code}"
    )
    return row


def item10(tmp: Path, d: Clavisd, advice: Path) -> Row:
    row = Row(10, "advice valid_s bound, far-future advice, empty nodes",
              "advice `valid_s` had no upper bound (a far-future `generated` stayed fresh for "
              "ever); an empty `nodes` list reached `qsort(NULL, 0, …)`")  # fmt: skip
    home = tmp / "valid"
    home.mkdir()
    bad = Clavisd(home, hosts=2, extra="[advice]\nvalid_s = 7200\n")
    code = bad.run_to_exit()
    row.check("advice.valid_s = 7200 refused at start (exit 2)", code == 2)
    wait_for(advice.exists, 30, "the advice file")
    doc = json.loads(advice.read_text())
    empty = {**doc, "nodes": []}
    ahead = {**doc, "generated": "2099-01-01T00:00:00+00:00"}
    model_fresh = AdviceFile.model_validate(ahead).fresh(time.time())
    row.check("far-future advice not fresh (contract)", not model_fresh)
    reader = ROOT / "slurm-plugin" / "build" / "clavis_advice_test"
    c_out: list[str] = []
    if reader.exists():
        for name, content in (("empty", empty), ("ahead", ahead)):
            f = tmp / f"advice-{name}.json"
            f.write_text(json.dumps(content))
            p = subprocess.run(
                [str(reader), "load", str(f), str(time.time()), str(2**22)],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            c_out.append(f"{name}: exit {p.returncode} `{p.stdout.strip()[:60]}`")
        row.check(
            "C reader: empty nodes read without a crash",
            c_out[0].startswith(("empty: exit 0", "empty: exit 1")),
        )
        row.check("C reader: far-future advice not used", "none:" in c_out[1])
    else:
        c_out.append("C reader not built (make slurm-plugin): not tried")
    row.after = (
        f"valid_s = 7200: clavisd exit {code}; contract fresh(+73 y) = {model_fresh}; "
        + "; ".join(c_out)
    )
    return row


def run_all(tmp: Path, marker: str, log: Callable[[str], None]) -> list[Row]:
    """Every item row; a row that raises is recorded as failed with the error."""
    rows: list[Row] = []
    main = tmp / "main"
    main.mkdir()
    d = Clavisd(main, hosts=4, extra=f'[advice]\npath = "{main / "advice.json"}"\n'
                "[repack]\ninterval_s = 0\ntime_limit_s = 2\n")  # fmt: skip
    d.start()
    try:
        steps: list[tuple[int, Callable[[], Row]]] = [
            (10, lambda: item10(tmp, d, main / "advice.json")),  # before any container
            (1, lambda: item1(d)),
            (5, lambda: item5(d)),
            (7, lambda: item7(d, marker)),
            (8, lambda: item8(d)),
            (9, lambda: item9(d, yaml.safe_load((main / "cluster.yaml").read_text()))),
        ]
        for n, sub in (("3", item3), ("4", item4), ("6", item6)):
            home = tmp / f"item{n}"
            home.mkdir()
            steps.append((int(n), lambda sub=sub, home=home: sub(home)))  # type: ignore[misc]
        for number, step in steps:
            try:
                row = step()
            except Exception as exc:  # one item's failure is its row's, not the bench's
                row = Row(number, "error", "", after=f"{type(exc).__name__}: {exc}")
                row.check("ran", False)
            log(f"item {row.item}: {'pass' if row.ok else 'FAIL'}: {row.after}")
            rows.append(row)
    finally:
        d.stop()
    return sorted(rows, key=lambda r: r.item)
