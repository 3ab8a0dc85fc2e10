"""clavis_slurm_power.py - Slurm's SuspendProgram and ResumeProgram for Clavis nodes.

slurmctld runs `clavis-slurm-suspend HOSTLIST` and `clavis-slurm-resume HOSTLIST` as
SlurmUser, with only SLURM_CONF (and SLURM_JOB_ID, SLURM_RESUME_FILE) in the environment
(power_save.c, _run_prog). Each expands the host list with scontrol and asks clavisd
(docs/clavisd.md, "Slurm power saving"): suspend stops the nodes' containers; resume
sends, once per job of SLURM_RESUME_FILE, each node's CPUs and memory and the job's
nodes that are up already (its allocated nodes not being resumed), and clavisd chooses
the hosts near those, powers them on if needed and starts the containers. Requests are
signed with a power key (role "power": clavisd lets it reach /nodes/suspend and
/nodes/resume only), the scheme of clavis_contracts/signing.py, loaded from beside this
file: the system Python, standard library only, no venv.

Configuration: `clavis-slurm-power.toml` beside SLURM_CONF, else
/etc/clavis/slurm-power.toml:

    url = "http://head:7780"         # clavisd
    key_file = "/etc/clavis/slurm-power-key.toml"  # [[keys]] id, role = "power", secret;
                                     # mode 0600, owned by SlurmUser: never logged
    timeout_s = 300                  # a resume may wait for a host to power on
    connect_wait_s = 60              # clavisd not listening (starting, restarting): retry
                                     # each second this long (nothing was sent)
    log_file = "/var/log/slurm/clavis-power.log"
    scontrol = "/usr/bin/scontrol"   # slurmctld gives its programs no PATH
    ca_file = ""                     # a CA for clavisd's https certificate

Exit status 0 when every node was handled, 1 otherwise (slurmctld logs it; a node that
did not resume is marked down by Slurm after ResumeTimeout).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import ssl
import stat
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
DEFAULT_CONF = Path("/etc/clavis/slurm-power.toml")
CONF_NAME = "clavis-slurm-power.toml"
MAX_NODES = 4096  # clavisd's own bound on one request
# clavisd's resume request (solver/clavis/service/slurmpower_api.py, ResumeIn): version 2
# adds job_nodes; a request without them is sent as version 1, which every clavisd reads
RESUME_VERSION = 2
NODE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,255}$")


class PowerError(Exception):
    """A failure this run reports and exits 1 for."""


def _signing() -> Any:
    """clavis_contracts/signing.py (stdlib only), shipped beside this program."""
    spec = importlib.util.spec_from_file_location("clavis_signing", HERE / "clavis_signing.py")
    if spec is None or spec.loader is None:
        raise PowerError(f"{HERE / 'clavis_signing.py'} is missing")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def config_path() -> Path:
    conf = os.environ.get("SLURM_CONF", "")
    beside = Path(conf).with_name(CONF_NAME) if conf else None
    return beside if beside is not None and beside.is_file() else DEFAULT_CONF


def load_config(path: Path) -> dict[str, Any]:
    try:
        cfg = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PowerError(f"{path}: {exc}") from exc
    unknown = sorted(set(cfg) - {"url", "key_file", "timeout_s", "log_file", "scontrol",
                                 "ca_file", "connect_wait_s"})  # fmt: skip
    if unknown or not isinstance(cfg.get("url"), str) or not isinstance(cfg.get("key_file"), str):
        raise PowerError(f"{path}: needs url and key_file (strings); unknown keys {unknown}")
    return cfg


def load_key(path: Path) -> tuple[str, bytes]:
    """(key id, secret) of the file's first key; refused unless private to its owner and
    owned by the user reading it (as clavis_contracts.keys checks its files)."""
    try:
        st = path.stat()
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PowerError(f"key file {path}: {type(exc).__name__}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PowerError(f"key file {path} is mode {stat.S_IMODE(st.st_mode):o}: want 600")
    if st.st_uid != os.geteuid():
        raise PowerError(f"key file {path} is owned by uid {st.st_uid}, not by this user")
    keys = data.get("keys")
    if not (isinstance(keys, list) and keys and isinstance(keys[0], dict)):
        raise PowerError(f"key file {path}: no [[keys]] entry")
    key_id, secret = keys[0].get("id"), keys[0].get("secret")
    if not (isinstance(key_id, str) and isinstance(secret, str) and len(secret) >= 16):
        raise PowerError(f"key file {path}: the first key needs id and a secret of 16+ bytes")
    return key_id, secret.encode()


def hostnames(scontrol: str, hostlist: str) -> list[str]:
    cp = subprocess.run([scontrol, "show", "hostnames", hostlist], capture_output=True,
                        text=True, timeout=30, check=False)  # fmt: skip
    names = cp.stdout.split()
    if cp.returncode != 0 or not names or len(names) > MAX_NODES:
        raise PowerError(f"scontrol show hostnames {hostlist!r}: {cp.stderr.strip()[:200]}")
    return names


def node_sizes(scontrol: str, names: list[str]) -> list[dict[str, Any]]:
    """Each node's CPUs and memory as slurm.conf gives them (CPUTot, RealMemory MB)."""
    cp = subprocess.run([scontrol, "show", "node", "-o", ",".join(names)],
                        capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    sizes = {}
    for line in cp.stdout.splitlines():
        name = re.search(r"NodeName=(\S+)", line)
        cpus = re.search(r"CPUTot=(\d+)", line)
        mem = re.search(r"RealMemory=(\d+)", line)
        if name and cpus and mem:
            sizes[name.group(1)] = {"name": name.group(1), "cores": max(1, int(cpus.group(1))),
                                    "memory_bytes": int(mem.group(1)) * 1024 * 1024}  # fmt: skip
    missing = [n for n in names if n not in sizes]
    if missing:
        raise PowerError(f"scontrol show node: no CPUTot/RealMemory for {missing[:5]}")
    return [sizes[n] for n in names]


class ResumeGroup(NamedTuple):
    """One resume request: the nodes to start together, and the job's nodes that are up
    already (``job_nodes``), which clavisd places them near."""

    nodes: list[str]
    job_nodes: list[str]


def resume_groups(
    names: list[str], resume_file: str, expand: Any, job_nodelist: Any
) -> tuple[list[ResumeGroup], list[str]]:
    """The nodes in groups, one per job of SLURM_RESUME_FILE, and the problems found in
    the file (each names the job and the field; a bad field is not used, the job's nodes
    are still resumed). slurmctld's JSON (power_save.c): Slurm 23.02 on writes
    {"all_nodes_resume", "jobs": [{"job_id", "nodes_alloc", "nodes_resume", ...}]},
    22.05 {"all_nodes", "jobs": [{"job_id", "nodes"}]} without the allocated nodes, which
    ``job_nodelist`` (job id -> host list: scontrol show job) then gives. A job's nodes
    that are up are its allocated ones that no group of this run resumes. Nodes of no
    job, or all of them when the file is missing or unreadable, form one more group.
    ``expand``: host list -> names (scontrol show hostnames; raises PowerError)."""
    try:
        doc = json.loads(Path(resume_file).read_text()) if resume_file else {}
        jobs = doc.get("jobs", []) if isinstance(doc, dict) else []
    except (OSError, ValueError):
        jobs = []
    wanted, seen = set(names), set()
    groups: list[ResumeGroup] = []
    problems: list[str] = []
    for job in jobs if isinstance(jobs, list) else []:
        if not isinstance(job, dict):
            continue
        hostlist = job.get("nodes_resume", job.get("nodes"))
        if not isinstance(hostlist, str) or not hostlist:
            continue
        try:
            group = [n for n in expand(hostlist) if n in wanted and n not in seen]
        except PowerError:
            continue
        if group:
            up, problem = _job_nodes(job, expand, job_nodelist)
            if problem:
                problems.append(problem)
            groups.append(ResumeGroup(group, [n for n in up if n not in wanted]))
            seen.update(group)
    rest = [n for n in names if n not in seen]
    return groups + ([ResumeGroup(rest, [])] if rest else []), problems


def _job_nodes(job: dict[str, Any], expand: Any, job_nodelist: Any) -> tuple[list[str], str]:
    """A resume file job's allocated nodes (nodes_alloc, else scontrol's NodeList for
    Slurm 22.05) and a problem ("" if none): garbage in the field gives no nodes."""
    job_id = job.get("job_id")
    what = f"SLURM_RESUME_FILE job {str(job_id)[:20]}"
    if "nodes_alloc" in job:
        hostlist, field = job["nodes_alloc"], "nodes_alloc"
    elif isinstance(job_id, int) and not isinstance(job_id, bool) and job_id > 0:
        try:
            hostlist, field = job_nodelist(job_id), "NodeList (scontrol show job)"
        except PowerError as exc:
            return [], f"{what}: its allocated nodes are unknown: {exc}"
    else:
        return [], f"{what}: job_id {str(job_id)[:20]!r} is not a job id"
    if not isinstance(hostlist, str) or not hostlist:
        return [], f"{what}: {field} {json.dumps(hostlist)[:80]} is not a host list"
    try:
        nodes = expand(hostlist)
    except PowerError as exc:
        return [], f"{what}: {field} {hostlist[:80]!r} is not a host list: {exc}"
    bad = [n for n in nodes if not NODE_NAME.match(n)]
    if bad:
        return [], f"{what}: {field} names {bad[0][:80]!r}, not a node name"
    return nodes, ""


def job_nodelist(scontrol: str, job_id: int) -> str:
    """A job's allocated nodes as a host list (`scontrol show job -o`'s NodeList)."""
    cp = subprocess.run([scontrol, "show", "job", "-o", str(job_id)], capture_output=True,
                        text=True, timeout=30, check=False)  # fmt: skip
    m = re.search(r"(?:^|\s)NodeList=(\S+)", cp.stdout)
    if cp.returncode != 0 or m is None or m.group(1) == "(null)":
        raise PowerError(f"scontrol show job {job_id}: {cp.stderr.strip()[:200] or 'no NodeList'}")
    return m.group(1)


def resume_request(sizes: list[dict[str, Any]], job_nodes: list[str]) -> dict[str, Any]:
    """The body of POST /nodes/resume, checked by clavisd's rules (ResumeIn) before it is
    sent: version 1 without job nodes, else version 2. Raises PowerError naming the field."""
    names = [n.get("name") for n in sizes]
    if not 1 <= len(sizes) <= MAX_NODES or len(job_nodes) > MAX_NODES:
        raise PowerError(f"resume request: {len(sizes)} nodes and {len(job_nodes)} job_nodes "
                         f"(1 to {MAX_NODES} nodes, at most {MAX_NODES} job_nodes)")  # fmt: skip
    for field, listed in (("nodes", names), ("job_nodes", job_nodes)):
        bad = [n for n in listed if not (isinstance(n, str) and NODE_NAME.match(n))]
        if bad:
            raise PowerError(f"resume request: {field} has {str(bad[0])[:80]!r}, not a node name")
        if len(set(listed)) != len(listed):
            raise PowerError(f"resume request: {field} lists a node more than once")
    for n in sizes:
        cores, mem = n.get("cores"), n.get("memory_bytes")
        if not (isinstance(cores, int) and 1 <= cores <= 65536
                and isinstance(mem, int) and 0 <= mem <= 2**50):  # fmt: skip
            raise PowerError(f"resume request: node {n.get('name')}: cores {cores!r} or "
                             f"memory_bytes {mem!r} out of range")  # fmt: skip
    both = sorted(set(names) & set(job_nodes))
    if both:
        raise PowerError(f"resume request: job_nodes {', '.join(both[:5])} are being resumed")
    if not job_nodes:
        return {"nodes": sizes}
    return {"schema_version": RESUME_VERSION, "nodes": sizes, "job_nodes": job_nodes}


def call(cfg: dict[str, Any], path: str, doc: dict[str, Any]) -> dict[str, Any]:
    """POST ``doc`` to clavisd, signed. A refused connection (clavisd starting or
    restarting: nothing was sent) is tried again each second for ``connect_wait_s``, so a
    suspend Slurm asks for then is not lost (Slurm counts the node powered down whatever
    this program answers); any other failure is not retried."""
    key_id, secret = load_key(Path(cfg["key_file"]))
    body = json.dumps(doc).encode()
    ctx = ssl.create_default_context(cafile=cfg.get("ca_file") or None)
    deadline = time.monotonic() + float(cfg.get("connect_wait_s", 60))
    while True:
        # signed afresh each try: a nonce is used once and the timestamp must be recent
        headers = _signing().sign(secret, "POST", path, body, time.time(), key_id=key_id)
        headers["Content-Type"] = "application/json"
        req = urllib.request.Request(cfg["url"].rstrip("/") + path, data=body, method="POST",
                                     headers=headers)  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=float(cfg.get("timeout_s", 300)),
                                        context=ctx) as r:  # fmt: skip
                out: dict[str, Any] = json.loads(r.read())
                return out
        except urllib.error.HTTPError as exc:
            raise PowerError(f"clavisd refused {path}: {exc.code} {exc.read()[:300]!r}") from None
        except urllib.error.URLError as exc:
            refused = isinstance(exc.reason, ConnectionRefusedError)
            if not refused or time.monotonic() >= deadline:
                raise PowerError(f"clavisd at {cfg['url']} did not answer {path}: {exc}") from None
        except (TimeoutError, ValueError) as exc:
            raise PowerError(f"clavisd at {cfg['url']} did not answer {path}: {exc}") from None
        time.sleep(1.0)


def _log(cfg: dict[str, Any], text: str) -> None:
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} clavis-slurm-power[{os.getpid()}] {text}\n"
    target = cfg.get("log_file")
    if target:
        try:
            with open(target, "a", encoding="utf-8") as f:
                f.write(line)
            return
        except OSError:
            pass
    sys.stderr.write(line)


def run(action: str, hostlist: str) -> int:
    try:
        cfg = load_config(config_path())
    except PowerError as exc:
        sys.stderr.write(f"clavis-slurm-power: {exc}\n")
        return 1
    scontrol = str(cfg.get("scontrol", "/usr/bin/scontrol"))
    t0 = time.monotonic()
    try:
        names = hostnames(scontrol, hostlist)
        if action == "suspend":
            results = call(cfg, "/api/v1/nodes/suspend", {"nodes": names}).get("results", [])
        else:
            # one request per job: clavisd places a request's nodes as one job's, near
            # the job's nodes that are up
            groups, problems = resume_groups(
                names, os.environ.get("SLURM_RESUME_FILE", ""),
                lambda h: hostnames(scontrol, h), lambda j: job_nodelist(scontrol, j),
            )  # fmt: skip
            for problem in problems:
                _log(cfg, f"action=resume {problem}; its nodes resumed without their job's")
            docs = [resume_request(node_sizes(scontrol, g.nodes), g.job_nodes) for g in groups]
            # side by side: clavisd boots one job's nodes while it chooses another's hosts
            with ThreadPoolExecutor(max_workers=min(8, len(docs))) as pool:
                answers = list(pool.map(lambda d: call(cfg, "/api/v1/nodes/resume", d), docs))
            results = [r for a in answers for r in a.get("results", [])]
    except PowerError as exc:
        _log(cfg, f"action={action} nodes={hostlist} failed: {exc}")
        return 1
    bad = 0
    for r in results:
        bad += not r.get("ok")
        _log(cfg, f"action={action} node={r.get('node')} host={r.get('host')} "
                  f"ok={r.get('ok')} {str(r.get('message'))[:200]}")  # fmt: skip
    _log(cfg, f"action={action} nodes={hostlist} done in {time.monotonic() - t0:.1f}s, "
              f"{bad} failed")  # fmt: skip
    return 1 if bad or not results else 0


def main(action: str, argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write(f"usage: clavis-slurm-{action} HOSTLIST\n")
        return 2
    return run(action, argv[0])
