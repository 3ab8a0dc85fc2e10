"""Emulated miss counters on the testbed: `up` runs missd, a real Slurm job running a
program the profile calls a devil reads high through the monitor's emulated source, the
same job stopped (SIGSTOP) reads near zero, and a monitor not configured for emulation
never reports it."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from clavis_contracts.report import ContainerSample
from clavis_monitor.agent import Agent
from clavis_monitor.config import parse

from . import tb

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

NODE = "r2h2c2"
PROFILE = """
instructions_per_cpu_s = 1.0e9
default_misses_per_cpu_s = 2.0e5
[programs]
"streamdevil" = 3.0e7
"""


def _agent(testbed: dict[str, Any], tmp_path: Path, emulated: bool) -> Agent:
    doc: dict[str, Any] = {
        "host": tb.host_of(NODE),
        "containers": {"lxc_paths": [testbed["lxcpath"]], "include": [NODE]},
        "traffic": {"backend": "none"},
        "power": {"methods": ["rapl"], "rapl_root": str(tmp_path / "no-rapl")},
    }
    if emulated:
        doc["emulation"] = {"miss_counters_dir": testbed["emulated_misses"]["dir"]}
    return Agent(parse(doc), None)


def _sample(agent: Agent, secs: float) -> ContainerSample:
    """The node's sample over an interval of ``secs`` (missd writes every second)."""
    agent.sample_cpu()
    agent.sample_perf()
    time.sleep(secs)
    agent.sample_cpu()
    agent.sample_perf()
    (sample,) = [c for c in agent.report_once().containers if c.name == NODE]
    return sample


def _pids_of(exe: Path) -> list[int]:
    want = str(exe).encode() + b"\0"
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "cmdline").read_bytes() == want:
                    found.append(int(d.name))
            except OSError:
                continue
    return found


def test_a_devil_job_reads_high_and_near_zero_when_stopped(
    testbed: dict[str, Any], tmp_path: Path
) -> None:
    profiles = Path(testbed["emulated_misses"]["profiles"])
    assert profiles.is_file()  # missd wrote its defaults at start
    saved = profiles.read_text()
    work = Path(testbed["shared_dir"]) / f"clavis-misses-{os.getpid()}"
    work.mkdir()
    exe = work / "streamdevil"  # its command name is what the profile matches
    shutil.copy2("/usr/bin/yes", exe)
    job = ""
    pid = 0
    try:
        profiles.write_text(PROFILE)  # the test declares its program's profile
        tb.nodes_usable([NODE])
        out = tb.slurm(["sbatch", "--parsable", "-w", NODE, "-o", "/dev/null", "-t", "3",
                        "--wrap", f"exec {exe} >/dev/null"])  # fmt: skip
        job = out.strip().split(";")[0]
        deadline = time.monotonic() + 30
        while not _pids_of(exe) and time.monotonic() < deadline:
            time.sleep(0.2)
        (pid,) = _pids_of(exe)
        time.sleep(1.5)  # missd has seen it run

        agent = _agent(testbed, tmp_path, emulated=True)
        assert agent.source == "emulated"
        busy = _sample(agent, 2.5)
        assert busy.intensity_source == "emulated", agent.unsupported
        assert busy.intensity_mpki is not None and busy.intensity_mpki > 20, busy

        os.kill(pid, signal.SIGSTOP)
        time.sleep(2.5)  # every missd tick from here on sees it stopped
        stopped = _sample(agent, 2.5)
        assert stopped.intensity_source == "emulated"
        assert stopped.intensity_mpki is not None and stopped.intensity_mpki < 1.0, stopped

        # not configured: the same files are never read (no PMU here: unsupported)
        plain = _sample(_agent(testbed, tmp_path, emulated=False), 1.2)
        assert plain.intensity_source != "emulated" and plain.intensity_mpki is None
    finally:
        if pid:
            os.kill(pid, signal.SIGCONT)
        if job:
            tb.slurm(["scancel", job])
        profiles.write_text(saved)
        deadline = time.monotonic() + 30
        while _pids_of(exe) and time.monotonic() < deadline:
            time.sleep(0.2)
        shutil.rmtree(work, ignore_errors=True)
