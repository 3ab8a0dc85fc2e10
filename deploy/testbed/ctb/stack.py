"""The Clavis stack on the testbed (`clavis-testbed up --stack`).

    head netns ctb-core:   clavisd on HEAD_IP:7780 (config, SQLite store, keys, advice
                           in /run/clavis-testbed/clavis), select/clavis reads its advice
    host netns ctb-rRhH:   clavis-monitor (the containers on its host through LXC, its nft
                           counters, its BMC over IPMI LAN+), reports signed to clavisd;
                           clavis-migrator (agents.py), the steps clavisd sends
    node containers:       spank_clavis.so (plugstack.conf) -> /run/clavis-testbed/monitor/
                           monitor.sock, which is the socket of the monitor of the host the
                           node runs on now

plugstack.conf is shared by every node and its `socket=` takes no per-node pattern, so
every node names the same path: in each node it is a symlink, in a per-node directory
bind-mounted read-only at /run/clavis-testbed/monitor, to the socket of the host the node
is on (/run/clavis-testbed/sockets/HOST, all of them bind-mounted read-only at the same
path in every node). A migration re-points the symlink (placement.py); the mounts stay
what CRIU restores. Every container gets the mounts whether or not the stack runs, so the
stack can be started on a running testbed.

The daemons are the project's own console scripts from the repository's .venv
(`make .venv/.installed`; CLAVIS_VENV names another), run as programs: this module stays
standard library only. Every daemon is recorded in state.json like the others, so `down`
stops exactly what `up` started.
"""

from __future__ import annotations

import grp
import json
import os
import secrets
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import agents, cluster, misses, paths, placement, powersave, slurm
from .proc import CommandError, Owned, in_netns, run, spawn, stop_all
from .state import State
from .topology import Container, Topology

VENV = Path(os.environ.get("CLAVIS_VENV", str(paths.REPO / ".venv")))
CLAVIS_DIR = paths.ADVICE.parent  # clavisd's directory: config, store, keys, advice
CLAVISD_CONF = CLAVIS_DIR / "clavis.toml"
AGENT_KEYS = CLAVIS_DIR / "agent-keys.toml"  # every host's key and the admin key
HOST_KEYS = CLAVIS_DIR / "keys"  # HOST_KEYS/HOST.toml: that host's own key (its monitor)
STORE = CLAVIS_DIR / "clavis.db"
CLUSTER_DOC = paths.CLUSTER  # the solver's cluster document (cluster.py, written by up)
MONITOR_TOPOLOGY = CLAVIS_DIR / "topology.toml"  # the monitors' traffic peers
MONITORS = placement.MONITORS  # MONITORS/HOST: that monitor's config, spool, include file
SOCKETS = placement.SOCKETS  # SOCKETS/HOST: that monitor's registration socket
NODE_SOCKET_DIR = paths.RUN / "monitor"  # in each node: placement.node_link_dir(NODE)
SOCKET_NAME = placement.SOCKET_NAME
SPANK_SO = paths.REPO / "slurm-plugin" / "build" / "spank_clavis.so"
# not in PluginDir (paths.PLUGINS): Slurm looks for its own plugins there
SPANK_DIR = paths.ETC / "spank"
PLUGSTACK = paths.ETC / "plugstack.conf"  # beside slurm.conf: Slurm's default place
PORT = 7780
METRICS_PORT = 9782  # in each host's netns, on its 127.0.0.1
# the advice steers placements: slurmctld (SlurmUser slurm) reads it through its group
ADVICE_MODE = "0640"
ADVICE_GROUP = "slurm"
REPORT_WAIT_S = 60.0
# the monitors' sampling interval (their default is 1 s): clavisd's classes take 7
# intervals, so the demo's jobs are classed in about 3.5 s (docs/testbed.md)
MONITOR_INTERVAL_S = 0.5
CLAVISD = "clavisd"
MONITOR = "clavis-monitor-"


def socket_dir(host: str) -> Path:
    return placement.socket_dir(host)


def url(topo: Topology) -> str:
    return f"http://{topo.head_ip}:{PORT}"


def running(st: State) -> bool:
    """Whether state.json records the stack (then a repaired testbed gets it again)."""
    return any(p.what == CLAVISD for p in st.processes)


def ours(p: Owned) -> bool:
    return p.what == CLAVISD or p.what.startswith(MONITOR) or agents.ours(p)


def node_mount(c: Container) -> str:
    """The LXC mount entries giving node c every host's monitor socket directory and,
    at NODE_SOCKET_DIR, its own directory whose monitor.sock points at its host's."""
    SOCKETS.mkdir(parents=True, exist_ok=True)
    links = placement.node_link_dir(c.name)
    links.mkdir(parents=True, exist_ok=True)
    # read-only: a node can connect to a socket (sockets are exempt from a read-only
    # mount) but not replace it or its link
    return "".join(
        f"lxc.mount.entry = {src} {str(dst).lstrip('/')} none ro,bind,create=dir 0 0\n"
        for src, dst in ((SOCKETS, SOCKETS), (links, NODE_SOCKET_DIR))
    )


def add_node_mount(c: Container) -> None:
    """Append node_mount to the container's LXC config (written by containers.py)."""
    with open(paths.LXC / c.name / "config", "a", encoding="utf-8") as f:
        f.write(node_mount(c))


# ---------------------------------------------------------------- files


def _program(name: str) -> str:
    exe = VENV / "bin" / name
    if not os.access(exe, os.X_OK):
        raise CommandError(f"{exe} missing: run `make .venv/.installed` (or set CLAVIS_VENV)")
    return str(exe)


def _toml_str(v: str) -> str:
    return json.dumps(v)  # a JSON string is a valid TOML basic string


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(_toml_str(i) for i in items) + "]"


def advice_path() -> Path:
    """The advice file select_clavis.conf names (clavisd must write that one)."""
    try:
        for line in paths.SELECT_CONF.read_text().splitlines():
            if line.startswith("AdvicePath="):
                return Path(line.split("=", 1)[1].strip())
    except OSError:
        pass
    return paths.ADVICE


def _hashes(passwords: dict[str, str], timeout: float = 60.0) -> dict[str, str]:
    """Each password's scrypt hash (`clavis hash-password`), all at once: each call is
    mostly the CLI's start-up, and the machine has two cores."""
    argv = [_program("clavis"), "hash-password", "--stdin"]
    procs = {role: subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
             for role in passwords}  # fmt: skip
    deadline = time.monotonic() + timeout
    out: dict[str, str] = {}
    try:
        for role, proc in procs.items():
            left = max(0.1, deadline - time.monotonic())
            stdout, stderr = proc.communicate(passwords[role] + "\n", timeout=left)
            if proc.returncode != 0:
                raise CommandError(f"clavis hash-password exited {proc.returncode}: {stderr}")
            out[role] = stdout.strip()
    except subprocess.TimeoutExpired as exc:
        raise CommandError(f"clavis hash-password: no answer within {timeout:.0f}s") from exc
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)
    return out


def _write_private(path: Path, text: str) -> None:
    """Create a root-only file (0600 from its first byte on)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def write_clavisd_files(topo: Topology, power_save: bool = False) -> dict[str, str]:
    """clavisd's directory, agent keys, cluster document and config; return the generated
    UI passwords by role (only their scrypt hashes are kept, in the config). With
    ``power_save``, also host power, Slurm power saving and the programs' key
    (powersave.py)."""
    CLAVIS_DIR.mkdir(parents=True, exist_ok=True)
    group = ADVICE_GROUP if _group_exists(ADVICE_GROUP) else ""
    # slurmctld must traverse it to the advice; the store and config stay root's
    os.chown(CLAVIS_DIR, 0, grp.getgrnam(group).gr_gid if group else 0)
    CLAVIS_DIR.chmod(0o750)
    power = ""
    if power_save:
        entry = powersave.key_entry()
        write_agent_keys(topo, extra=entry)
        powersave.write_program_files(topo, url(topo), entry, slurm.ensure_slurm_user().pw_uid)
        # every BMC has the same password with power saving (cli.py, _build)
        first = topo.hosts()[0].name
        password = (paths.BMC / first / "password").read_text().strip()
        node_command = [str(paths.HERE / "clavis-testbed"), "node-power"]
        power = powersave.clavisd_toml(topo, password, node_command)
    else:
        write_agent_keys(topo)
    if not CLUSTER_DOC.exists():  # up writes it; a testbed from before that did not
        cluster.write(topo)
    passwords = {role: secrets.token_urlsafe(12) for role in ("admin", "viewer")}
    hashes = _hashes(passwords)
    users = "".join(
        f"[[users]]\nname = {_toml_str(role)}\nrole = {_toml_str(role)}\n"
        f"password_scrypt = {_toml_str(hashes[role])}\n"
        for role in passwords
    )
    _write_private(
        CLAVISD_CONF,
        f"# generated by clavis-testbed up --stack (docs/testbed.md)\n"
        f"cluster_file = {_toml_str(str(CLUSTER_DOC))}\n"
        f"{users}"
        f"[server]\nlisten = {_toml_str(topo.head_ip)}\nport = {PORT}\n"
        f"[store]\nurl = {_toml_str(f'sqlite:///{STORE}')}\n"
        f"[security]\nagent_keys_file = {_toml_str(str(AGENT_KEYS))}\n"
        # one process: the testbed's machine is small and shared
        f'[ingest]\nwriter = "thread"\n'
        # no internal applying loop: an admin (or the demo) runs `clavis repack`
        f"[repack]\ninterval_s = 0\ntime_limit_s = 10\nworkers = 1\nstep_deadline_s = 180\n"
        # a plan's steps polled twice a second: a wave starts soon after the last ends
        f"poll_s = 0.5\n"
        f"{agents.addresses_toml(topo)}"
        f"[advice]\npath = {_toml_str(str(advice_path()))}\nvalid_s = 60\n"
        f"mode = {_toml_str(ADVICE_MODE)}\ngroup = {_toml_str(group)}\n"
        f"{power}",
    )
    return passwords


def _key_entry(key_id: str, who: str) -> str:
    role = 'role = "admin"' if who == "" else f"host = {_toml_str(who)}"
    return (
        f"[[keys]]\nid = {_toml_str(key_id)}\n{role}\nsecret = {_toml_str(secrets.token_hex(32))}\n"
    )


def write_agent_keys(topo: Topology, extra: str = "") -> None:
    """A fresh key per host (in clavisd's list and in that host's own file) and an admin
    key for the demo's signed reads (clavis_contracts.keys); ``extra``: more entries."""
    HOST_KEYS.mkdir(mode=0o700, exist_ok=True)
    entries = [_key_entry("admin-1", ""), *([extra] if extra else [])]
    for h in topo.hosts():
        entry = _key_entry(f"{h.name}-1", h.name)
        _write_private(HOST_KEYS / f"{h.name}.toml", entry)
        entries.append(entry)
    _write_private(AGENT_KEYS, "".join(entries))


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def write_monitor_topology(topo: Topology) -> None:
    """Every host and container with its rack and address: the monitors' traffic peers."""
    lines = ["# generated by clavis-testbed up --stack"]
    for h in topo.hosts():
        lines += ["[[hosts]]", f"name = {_toml_str(h.name)}", f'rack = "r{h.rack}"',
                  f"addresses = {_toml_list([h.ip])}"]  # fmt: skip
    for c in topo.containers():
        lines += ["[[containers]]", f"name = {_toml_str(c.name)}",
                  f"host = {_toml_str(c.host)}", f"addresses = {_toml_list([c.ip])}"]  # fmt: skip
    MONITOR_TOPOLOGY.write_text("\n".join(lines) + "\n")


def monitor_config(topo: Topology, host_name: str, bmc: dict[str, Any]) -> str:
    host = next(h for h in topo.hosts() if h.name == host_name)
    d = MONITORS / host.name
    return (
        f"# generated by clavis-testbed up --stack: the monitor of {host.name}\n"
        f"host = {_toml_str(host.name)}\ninterval_s = {MONITOR_INTERVAL_S}\n"
        f"[clavisd]\nurl = {_toml_str(url(topo))}\n"
        f"key_file = {_toml_str(str(HOST_KEYS / f'{host.name}.toml'))}\n"
        f"[spool]\ndir = {_toml_str(str(d / 'spool'))}\n"
        f"[registration]\nsocket = {_toml_str(str(socket_dir(host.name) / SOCKET_NAME))}\n"
        f'[metrics]\nlisten = "127.0.0.1"\nport = {METRICS_PORT}\n'
        # all containers share one lxcpath and the machine's cgroups: the include file
        # names those on this host now (placement.py rewrites it when one moves)
        f"[containers]\nlxc_paths = {_toml_list([str(paths.LXC)])}\n"
        f"include_file = {_toml_str(str(placement.include_file(host.name)))}\n"
        f"rescan_s = 3.0\nlxd_sockets = []\n"
        f"[traffic]\ntopology_file = {_toml_str(str(MONITOR_TOPOLOGY))}\n"
        f'[power]\nmethods = ["ipmi-dcmi", "ipmi-sensor"]\n'
        f"bmc_host = {_toml_str(str(bmc['address']))}\nbmc_port = {int(bmc['port'])}\n"
        f"bmc_user = {_toml_str(str(bmc['user']))}\n"
        f"bmc_password_file = {_toml_str(str(bmc['password_file']))}\nevery_s = 5.0\n"
        # the machine has no PMU: the testbed's emulated miss counters (missd), named as
        # emulation in the reports (docs/testbed.md, "Emulated miss counters")
        f"[emulation]\nmiss_counters_dir = {_toml_str(str(misses.DIR))}\n"
    )


def write_plugstack() -> None:
    """spank_clavis.so (built if needed) in the configuration every node sees, with the
    socket path that is each node's own host's monitor (see the module docstring)."""
    run(["make", "-C", str(SPANK_SO.parent.parent), "spank"], timeout=300)
    SPANK_DIR.mkdir(parents=True, exist_ok=True)
    so = SPANK_DIR / SPANK_SO.name
    so.write_bytes(SPANK_SO.read_bytes())
    so.chmod(0o755)
    PLUGSTACK.write_text(
        "# generated by clavis-testbed up --stack: each node's socket path is its own\n"
        '# host\'s monitor (docs/testbed.md, "The Clavis stack")\n'
        f"optional {so} socket={NODE_SOCKET_DIR / SOCKET_NAME} timeout_ms=200\n"
    )


# ---------------------------------------------------------------- start, wait


_GET = """import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])) as r:
    sys.stdout.write(r.read().decode())
"""


def http_get(netns: str, address: str, timeout: float = 5.0) -> str:
    """GET a URL from inside a netns (the testbed's addresses live only there)."""
    argv = in_netns(netns, [sys.executable, "-c", _GET, address, str(timeout)])
    return run(argv, timeout=timeout + 10).stdout


def _wait_health(topo: Topology, clavisd: Owned, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not clavisd.alive():
            raise CommandError(f"clavisd exited; see {paths.LOG / 'clavisd.log'}")
        try:
            http_get(topo.core_netns, f"{url(topo)}/api/v1/health", timeout=2)
            return
        except CommandError as exc:
            last = str(exc)
            time.sleep(0.3)
    raise CommandError(f"clavisd did not answer within {timeout:.0f}s: {last[-300:]}")


def report_ages(topo: Topology, now: float | None = None) -> dict[str, float | None]:
    """Seconds since each host's newest report clavisd stored (None: none yet), read
    from clavisd's store (read-only), or {} when there is no store."""
    if not STORE.exists():
        return {}
    now = time.time() if now is None else now
    try:
        with sqlite3.connect(f"file:{STORE}?mode=ro", uri=True, timeout=2) as db:
            rows = dict(db.execute("SELECT name, last_report FROM hosts").fetchall())
    except sqlite3.Error:
        return {}
    return {
        h.name: None if rows.get(h.name) is None else round(now - float(rows[h.name]), 1)
        for h in topo.hosts()
    }


def wait_reports(topo: Topology, owned: list[Owned], timeout: float = REPORT_WAIT_S) -> None:
    """Bounded wait until every host's monitor has a report stored by clavisd."""
    deadline = time.monotonic() + timeout
    ages: dict[str, float | None] = {}
    while time.monotonic() < deadline:
        dead = [p.what for p in owned if not p.alive()]
        if dead:
            raise CommandError(f"{', '.join(dead)} exited; see the logs in {paths.LOG}")
        ages = report_ages(topo)
        if ages and all(a is not None for a in ages.values()):
            return
        time.sleep(0.5)
    silent = sorted(h for h, a in ages.items() if a is None) or [h.name for h in topo.hosts()]
    raise CommandError(f"no report from {', '.join(silent)} within {timeout:.0f}s")


def start(st: State, bmcs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Start clavisd and the monitors, write plugstack.conf; record every daemon in the
    state as it starts. Returns the UI passwords, to be shown once."""
    topo = st.topology
    passwords = write_clavisd_files(topo, st.power_save)
    write_monitor_topology(topo)
    # clavisd, the monitors and the agents start side by side (the monitors spool and
    # retry until clavisd answers); then one bounded wait for clavisd, one for reports
    clavisd = _spawn_clavisd(st)
    monitors = []
    for h in topo.hosts():
        d = MONITORS / h.name
        d.mkdir(parents=True, exist_ok=True)
        conf = d / "monitor.toml"
        conf.write_text(monitor_config(topo, h.name, bmcs[h.name]))
        socket_dir(h.name).mkdir(parents=True, exist_ok=True)
        m = spawn(
            f"{MONITOR}{h.name}",
            in_netns(h.netns, [_program("clavis-monitor"), "--config", str(conf)]),
            paths.LOG / f"monitor-{h.name}.log",
        )
        st.processes.append(m)
        st.save()
        monitors.append(m)
    write_plugstack()
    migrators = agents.start(st, _program("clavis-migrator"), HOST_KEYS)
    _wait_health(topo, clavisd)
    wait_reports(topo, [clavisd, *monitors, *migrators])
    return passwords


def _spawn_clavisd(st: State) -> Owned:
    topo = st.topology
    clavisd = spawn(
        CLAVISD,
        in_netns(topo.core_netns, [_program("clavisd"), "--config", str(CLAVISD_CONF)]),
        paths.LOG / "clavisd.log",
    )
    st.processes.append(clavisd)
    st.save()
    return clavisd


def _start_clavisd(st: State) -> Owned:
    clavisd = _spawn_clavisd(st)
    _wait_health(st.topology, clavisd)
    return clavisd


def restart_clavisd(st: State) -> Owned:
    """`clavis-testbed clavisd start`: clavisd again, on its own config and store, after
    it died (a crash, an OOM kill): what a unit's Restart= does on a head node. The
    restarted clavisd resumes the plans it had running (docs/clavisd.md)."""
    if not running(st):
        raise CommandError("the Clavis stack is not up (run `clavis-testbed up --stack`)")
    old = next(p for p in st.processes if p.what == CLAVISD)
    if old.alive():
        raise CommandError(f"clavisd runs already (pid {old.pid})")
    st.processes.remove(old)
    return _start_clavisd(st)


def start_agents(st: State) -> None:
    """`clavis-testbed agents start`: the migrators again (after `agents stop`)."""
    if not running(st):
        raise CommandError("the Clavis stack is not up (run `clavis-testbed up --stack`)")
    if any(agents.ours(p) for p in st.processes):
        raise CommandError("the migrator agents run already (`clavis-testbed agents stop`)")
    agents.start(st, _program("clavis-migrator"), HOST_KEYS)


def stop_stack(st: State) -> list[str]:
    """Stop the stack's daemons only (a failed `up --stack` on a running testbed) and
    forget them; the testbed itself stays. Returns what survived."""
    errors = []
    mine = [p for p in st.processes if ours(p)]
    stop_all(mine)
    for p in mine:
        if p.alive():
            errors.append(f"{p.what} (pid {p.pid}) survived SIGKILL")
    st.processes = [p for p in st.processes if p not in mine or p.alive()]
    st.save()
    PLUGSTACK.unlink(missing_ok=True)
    return errors


def passwords_text(passwords: dict[str, str], topo: Topology) -> str:
    logins = ", ".join(f"{role} / {pw}" for role, pw in passwords.items())
    return (
        f"clavisd {url(topo)} (head netns {topo.core_netns}) UI logins, shown this once "
        f"(only their hashes are kept): {logins}"
    )


# ---------------------------------------------------------------- status


def status(st: State) -> dict[str, Any] | None:
    """The stack's part of `status --json` (None when the stack is not up)."""
    if not running(st):
        return None
    topo = st.topology
    ages = report_ages(topo)
    advice = advice_path()
    advice_info: dict[str, Any] = {"path": str(advice), "age_s": None, "mode": None}
    try:
        a = advice.stat()
        advice_info.update(
            age_s=round(time.time() - a.st_mtime, 1), mode=f"{a.st_mode & 0o777:04o}",
            group=_group_name(a.st_gid),
        )  # fmt: skip
    except OSError:
        pass
    daemons = [{**p.to_dict(), "alive": p.alive()} for p in st.processes if ours(p)]
    return {
        "clavisd": {
            "url": url(topo),
            "netns": topo.core_netns,
            "config": str(CLAVISD_CONF),
            "store": str(STORE),
            "agent_keys_file": str(AGENT_KEYS),
            "cluster_file": str(CLUSTER_DOC),
            "log": str(paths.LOG / "clavisd.log"),
        },
        "monitors": {
            h.name: {
                "netns": h.netns,
                "config": str(MONITORS / h.name / "monitor.toml"),
                "socket": str(socket_dir(h.name) / SOCKET_NAME),
                "socket_in_nodes": str(NODE_SOCKET_DIR / SOCKET_NAME),
                "include_file": str(placement.include_file(h.name)),
                "metrics": f"http://127.0.0.1:{METRICS_PORT}/metrics",
                "log": str(paths.LOG / f"monitor-{h.name}.log"),
                "last_report_age_s": ages.get(h.name),
            }
            for h in topo.hosts()
        },
        "migrators": agents.status(st),
        "placement": str(placement.FILE),
        "plugstack": str(PLUGSTACK),
        "advice": advice_info,
        "daemons": daemons,
    }


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def table_lines(d: dict[str, Any] | None) -> list[str]:
    """The stack's lines under the status table (none without the stack: the table
    stays what it was)."""
    if d is None:
        return []
    alive = {p["what"]: p["alive"] for p in d["daemons"]}
    c = d["clavisd"]
    out = [f"stack: clavisd {c['url']} ({'running' if alive.get(CLAVISD) else 'DEAD'}), "
           f"config {c['config']}"]  # fmt: skip
    for host, m in d["monitors"].items():
        age = m["last_report_age_s"]
        state = "running" if alive.get(f"{MONITOR}{host}") else "DEAD"
        seen = "no report yet" if age is None else f"last report {age:.1f}s ago"
        out.append(f"  monitor {host}: {state}, {seen}")
    for host, a in d.get("migrators", {}).items():
        state = "running" if a["running"] else "DEAD"
        out.append(f"  migrator {host}: {state}, {a['address']} {a['answer']}")
    a = d["advice"]
    fresh = "absent" if a["age_s"] is None else f"written {a['age_s']:.1f}s ago, mode {a['mode']}"
    out.append(f"  advice {a['path']}: {fresh}")
    return out
