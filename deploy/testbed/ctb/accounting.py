"""Accounting on the head: MariaDB and slurmdbd in the head's netns, so `sacct` works as
on every site (TESTBED-NOTES, "Accounting").

MariaDB runs without an init system from a private data directory under the run
directory (removed by `down`), listening on the head netns's own 127.0.0.1 only. Its
freshly initialised data directory is cached (mariadb-install-db takes about 5 s) and
copied at each up; the database, its user and a random password are made at up.
slurmdbd reaches it over TCP (slurmdbd.conf has no socket option); slurmctld reaches
slurmdbd on the head address.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

from . import paths
from .proc import CommandError, Owned, in_netns, run, spawn
from .topology import Topology

MYSQL_USER = "mysql"
DB = "slurm_acct_db"
DB_USER = "slurm"
DBD_PORT = 6819
# small InnoDB files: the database holds a few hundred jobs' records, and lives in /run
_INNODB = [
    "--innodb-log-file-size=4M",
    "--innodb-buffer-pool-size=32M",
    "--innodb-data-file-path=ibdata1:4M:autoextend",
    # what slurmdbd asks for (it logs the others as "not recommended": harmless here)
    "--innodb-lock-wait-timeout=900",
]
TEMPLATE_VERSION = 1
TEMPLATE = paths.CACHE / f"mariadb-datadir-{TEMPLATE_VERSION}"
MARIADB = paths.RUN / "mariadb"
DATADIR = MARIADB / "data"
SOCKET = MARIADB / "mariadbd.sock"
DBD_CONF = paths.ETC / "slurmdbd.conf"


def _chown_tree(top: Path, user: str) -> None:
    pw = pwd.getpwnam(user)
    for d, dirs, files in os.walk(top):
        for n in [d, *(os.path.join(d, x) for x in dirs + files)]:
            os.lchown(n, pw.pw_uid, pw.pw_gid)


def build_template() -> Path:
    """A freshly initialised MariaDB data directory in the cache (once)."""
    if (TEMPLATE / ".clavis-ready").is_file():
        return TEMPLATE
    try:
        pwd.getpwnam(MYSQL_USER)
    except KeyError as exc:
        raise CommandError("no mysql user: install mariadb-server (install.sh)") from exc
    # Initialised under the run directory, which the mysql user can reach: the cache may
    # be a private 0700 directory (CLAVIS_CACHE from mkdtemp, as the testbed bench's
    # cold run has), where mariadb-install-db, running as mysql, cannot write.
    tmp = paths.RUN / f"mariadb-template-{TEMPLATE_VERSION}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _chown_tree(tmp, MYSQL_USER)
    run(
        [
            "mariadb-install-db", "--no-defaults", f"--user={MYSQL_USER}",
            f"--datadir={tmp}", "--skip-test-db", "--auth-root-authentication-method=socket",
            *_INNODB,
        ],
        timeout=300,
    )  # fmt: skip
    (tmp / ".clavis-ready").write_text(f"clavis testbed MariaDB datadir v{TEMPLATE_VERSION}\n")
    shutil.rmtree(TEMPLATE, ignore_errors=True)
    staged = TEMPLATE.with_name(TEMPLATE.name + ".tmp")
    shutil.rmtree(staged, ignore_errors=True)
    shutil.copytree(tmp, staged, symlinks=True)  # /run and the cache are other filesystems
    shutil.rmtree(tmp)
    staged.rename(TEMPLATE)
    return TEMPLATE


def _sql(topo: Topology, statements: str) -> None:
    run(
        in_netns(
            topo.core_netns,
            ["mariadb", "--no-defaults", f"--socket={SOCKET}", "-u", "root", "-e", statements],
        ),
        timeout=30,
    )


def start_mariadb(topo: Topology, owned: list[Owned], save: Callable[[], None]) -> str:
    """Copy the template, start mariadbd in the head netns (appended to owned and
    saved), create the accounting database and its user; return the user's password."""
    build_template()
    shutil.rmtree(MARIADB, ignore_errors=True)
    MARIADB.mkdir(parents=True)
    shutil.copytree(TEMPLATE, DATADIR, symlinks=True)
    _chown_tree(MARIADB, MYSQL_USER)
    # mariadbd writes its error log as mysql, in the root-owned log directory
    err = paths.LOG / "mariadbd.err"
    err.touch()
    mysql = pwd.getpwnam(MYSQL_USER)
    os.chown(err, mysql.pw_uid, mysql.pw_gid)
    daemon = spawn(
        "mariadbd",
        in_netns(
            topo.core_netns,
            [
                "mariadbd", "--no-defaults", f"--user={MYSQL_USER}", f"--datadir={DATADIR}",
                f"--socket={SOCKET}", f"--pid-file={MARIADB / 'mariadbd.pid'}",
                "--bind-address=127.0.0.1", "--port=3306", "--skip-name-resolve",
                f"--log-error={paths.LOG / 'mariadbd.err'}", *_INNODB,
            ],
        ),
        paths.LOG / "mariadbd.out",
    )  # fmt: skip
    owned.append(daemon)
    save()
    deadline = time.monotonic() + 30
    while not SOCKET.exists():
        if time.monotonic() > deadline or not daemon.alive():
            raise CommandError("mariadbd did not open its socket; see log/mariadbd.err")
        time.sleep(0.05)
    password = secrets.token_hex(12)
    # slurmdbd connects over TCP from 127.0.0.1 (no name resolution: the IP is the host)
    _sql(
        topo,
        f"CREATE DATABASE {DB}; CREATE USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY "
        f"'{password}'; GRANT ALL ON {DB}.* TO '{DB_USER}'@'127.0.0.1';",
    )
    return password


def write_dbd_conf(topo: Topology, password: str, slurm_user: str) -> None:
    """slurmdbd.conf beside slurm.conf (where slurmdbd looks for it), mode 0600 and
    owned by SlurmUser as slurmdbd requires: it holds the database password."""
    me = socket.gethostname().split(".")[0]
    text = f"""# generated by clavis-testbed up
AuthType=auth/munge
AuthInfo=socket={paths.MUNGE_SOCKET}
DbdHost={me}
DbdAddr={topo.head_ip}
DbdPort={DBD_PORT}
SlurmUser={slurm_user}
LogFile={paths.LOG / "slurmdbd.log"}
PidFile={paths.RUN / "slurmdbd" / "slurmdbd.pid"}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser={DB_USER}
StoragePass={password}
StorageLoc={DB}
"""
    pw = pwd.getpwnam(slurm_user)
    fd = os.open(DBD_CONF, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chown(DBD_CONF, pw.pw_uid, pw.pw_gid)
    piddir = paths.RUN / "slurmdbd"
    piddir.mkdir(parents=True, exist_ok=True)
    os.chown(piddir, pw.pw_uid, pw.pw_gid)


def start_slurmdbd(
    topo: Topology, env: dict[str, str], owned: list[Owned], save: Callable[[], None]
) -> None:
    """slurmdbd in the head netns (appended to owned and saved); returns once it
    accepts connections (it creates its tables on first start)."""
    daemon = spawn(
        "slurmdbd",
        in_netns(topo.core_netns, ["slurmdbd", "-D"]),
        paths.LOG / "slurmdbd.out",
        env=env,
    )
    owned.append(daemon)
    save()
    deadline = time.monotonic() + 60
    while True:
        cp = run(
            in_netns(
                topo.core_netns, ["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"]
            ),
            env=env,
            check=False,
            timeout=20,
        )
        if cp.returncode == 0:
            return
        if time.monotonic() > deadline or not daemon.alive():
            raise CommandError(
                f"slurmdbd did not answer; see log/slurmdbd.log: {cp.stderr.strip()}"
            )
        time.sleep(0.2)


def register_cluster(topo: Topology, name: str, env: dict[str, str]) -> None:
    """Add the cluster to the accounting database before slurmctld first registers."""
    run(
        in_netns(topo.core_netns, ["sacctmgr", "-i", "add", "cluster", name]),
        env=env,
        timeout=30,
    )
