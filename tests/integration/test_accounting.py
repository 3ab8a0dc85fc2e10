"""slurmctld and slurmdbd run as the dedicated SlurmUser; accounting through slurmdbd
and the head's own MariaDB, so `sacct` lists finished jobs."""

from __future__ import annotations

import pwd
import re
import time
from pathlib import Path
from typing import Any

import pytest

from . import tb

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]


def _process(testbed: dict[str, Any], what: str) -> int:
    (pid,) = [p["pid"] for p in testbed["processes"] if p["what"] == what]
    return int(pid)


def _uids(pid: int) -> list[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return [int(x) for x in line.split()[1:]]
    raise AssertionError(f"no Uid line for {pid}")


def test_slurm_daemons_run_as_slurmuser(testbed: dict[str, Any]) -> None:
    slurm = pwd.getpwnam("slurm")
    mysql = pwd.getpwnam("mysql")
    for what in ("slurmctld", "slurmdbd"):
        # real, effective, saved and filesystem uid: the daemon dropped root for good
        assert _uids(_process(testbed, what)) == [slurm.pw_uid] * 4, what
    assert _uids(_process(testbed, "mariadbd")) == [mysql.pw_uid] * 4
    config = tb.slurm(["scontrol", "show", "config"])
    assert re.search(r"^SlurmUser\s+=\s+slurm\(", config, re.M), config
    state = tb.RUN_DIR / "slurmctld"
    assert state.stat().st_uid == slurm.pw_uid
    # slurmctld wrote its state there as slurm: the files are really its own
    saved = [p for p in state.iterdir() if p.is_file()]
    assert saved and all(p.stat().st_uid == slurm.pw_uid for p in saved), saved
    dbd = tb.RUN_DIR / "etc" / "slurmdbd.conf"
    assert (dbd.stat().st_uid, dbd.stat().st_mode & 0o777) == (slurm.pw_uid, 0o600)


def test_sacct_lists_a_finished_job(testbed: dict[str, Any]) -> None:
    clusters = tb.slurm(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"])
    assert clusters.split() == ["clavis"], clusters
    out = tb.slurm(["sbatch", "--parsable", "-J", "acct-test", "-o", "/dev/null", "--wrap", "true"])
    job = out.strip().split(";")[0]
    assert job.isdigit(), out
    argv = ["sacct", "-n", "-P", "-X", "-j", job, "-o", "JobID,User,State,ExitCode,JobName"]
    deadline = time.monotonic() + 60
    row = ""
    while time.monotonic() < deadline:
        row = tb.slurm(argv).strip()
        if "|COMPLETED|0:0|" in row:
            break
        time.sleep(0.5)
    # JobName is not asserted: once in several runs slurmdbd stored this job's name as
    # "allocation", its placeholder for a start record that came without a name
    assert row.rsplit("|", 1)[0] == f"{job}|root|COMPLETED|0:0", row
