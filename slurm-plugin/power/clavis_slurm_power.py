"""clavis_slurm_power.py - Slurm's SuspendProgram and ResumeProgram for Clavis nodes.

slurmctld runs `clavis-slurm-suspend HOSTLIST` and `clavis-slurm-resume HOSTLIST` as
SlurmUser, with only SLURM_CONF (and SLURM_JOB_ID, SLURM_RESUME_FILE) in the environment
(power_save.c, _run_prog). Each expands the host list with scontrol and asks clavisd
(docs/clavisd.md, "Slurm power saving"): suspend stops the nodes' containers; resume
sends each node's CPUs and memory, and clavisd chooses the hosts, powers them on if
needed and starts the containers. Requests are signed with an admin key (the scheme of
clavis_contracts/signing.py, loaded from beside this file: the system Python, standard
library only, no venv).

Configuration: `clavis-slurm-power.toml` beside SLURM_CONF, else
/etc/clavis/slurm-power.toml:

    url = "http://head:7780"         # clavisd
    key_file = "/etc/clavis/slurm-power-key.toml"  # [[keys]] id, role = "admin", secret;
                                     # mode 0600, owned by SlurmUser: never logged
    timeout_s = 300                  # a resume may wait for a host to power on
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
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_CONF = Path("/etc/clavis/slurm-power.toml")
CONF_NAME = "clavis-slurm-power.toml"
MAX_NODES = 4096  # clavisd's own bound on one request


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
                                 "ca_file"})  # fmt: skip
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


def resume_groups(names: list[str], resume_file: str, expand: Any) -> list[list[str]]:
    """The nodes in groups, one per job of SLURM_RESUME_FILE (slurmctld's JSON:
    {"all_nodes": HOSTLIST, "jobs": [{"job_id": N, "nodes": HOSTLIST}, ...]},
    power_save.c), so clavisd keeps each job's nodes together; nodes of no job, or all of
    them when the file is missing or unreadable, form one more group. ``expand``: host
    list -> names (scontrol show hostnames)."""
    try:
        doc = json.loads(Path(resume_file).read_text()) if resume_file else {}
        jobs = doc.get("jobs", []) if isinstance(doc, dict) else []
    except (OSError, ValueError):
        jobs = []
    wanted, seen, groups = set(names), set(), []
    for job in jobs if isinstance(jobs, list) else []:
        hostlist = job.get("nodes") if isinstance(job, dict) else None
        if not isinstance(hostlist, str) or not hostlist:
            continue
        try:
            group = [n for n in expand(hostlist) if n in wanted and n not in seen]
        except PowerError:
            continue
        if group:
            groups.append(group)
            seen.update(group)
    rest = [n for n in names if n not in seen]
    return groups + ([rest] if rest else [])


def call(cfg: dict[str, Any], path: str, doc: dict[str, Any]) -> dict[str, Any]:
    key_id, secret = load_key(Path(cfg["key_file"]))
    body = json.dumps(doc).encode()
    headers = _signing().sign(secret, "POST", path, body, time.time(), key_id=key_id)
    headers["Content-Type"] = "application/json"
    req = urllib.request.Request(cfg["url"].rstrip("/") + path, data=body, method="POST",
                                 headers=headers)  # fmt: skip
    ctx = ssl.create_default_context(cafile=cfg.get("ca_file") or None)
    try:
        with urllib.request.urlopen(req, timeout=float(cfg.get("timeout_s", 300)),
                                    context=ctx) as r:  # fmt: skip
            out: dict[str, Any] = json.loads(r.read())
            return out
    except urllib.error.HTTPError as exc:
        raise PowerError(f"clavisd refused {path}: {exc.code} {exc.read()[:300]!r}") from None
    except (urllib.error.URLError, TimeoutError, ValueError) as exc:
        raise PowerError(f"clavisd at {cfg['url']} did not answer {path}: {exc}") from None


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
            # one request per job: clavisd places a request's nodes as one job's
            groups = resume_groups(names, os.environ.get("SLURM_RESUME_FILE", ""),
                                   lambda h: hostnames(scontrol, h))  # fmt: skip
            docs = [{"nodes": node_sizes(scontrol, group)} for group in groups]
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
