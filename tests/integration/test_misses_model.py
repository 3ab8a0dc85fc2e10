"""The testbed's emulated miss counter model (ctb.misses), on real processes in a real
cgroup: what a program really runs drives the counts (no testbed needed, root for the
cgroup)."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy" / "testbed"))

from ctb import misses

from clavis_monitor.perf import Counts, mpki

PROFILE = """
instructions_per_cpu_s = 1.0e9
default_misses_per_cpu_s = 2.0e5
[programs]
"streamdevil*" = 3.0e7
"""


def test_profiles_parse_and_match_in_order() -> None:
    prof = misses.parse_profiles(PROFILE + '"s*" = 1.0\n')
    assert prof.misses_per_cpu_s("streamdevil") == 3.0e7  # the first pattern that matches
    assert prof.misses_per_cpu_s("sleep") == 1.0
    assert prof.misses_per_cpu_s("yes") == 2.0e5
    assert misses.parse_profiles(misses.DEFAULT_PROFILES).misses_per_cpu_s("stream") == 4.0e7


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("x = 1\n", "unknown key(s) ['x']"),
        ("instructions_per_cpu_s = 0\n", "must be > 0"),
        ("default_misses_per_cpu_s = -1\n", "not within"),
        ('[programs]\n"a" = "lots"\n', "programs.'a': expected a number"),
        ('[programs]\n"a" = 2e9\n', "not within 0..1e+09"),  # more misses than instructions
        ("programs = 3\n", "expected a table"),
        ("[[", "not TOML"),
    ],
)
def test_bad_profiles_name_the_key(text: str, words: str) -> None:
    with pytest.raises(misses.ProfileError, match=re.escape(words)):
        misses.parse_profiles(text)


def test_parse_stat_takes_comm_with_spaces_and_parentheses() -> None:
    line = "4242 (a (b) c) S 1 1 1 0 -1 0 0 0 0 0 150 50 0 0 20 0 1 0 777 0 0"
    p = misses.parse_stat(4242, line)
    assert (p.pid, p.comm, p.start) == (4242, "a (b) c", 777)
    assert p.cpu_s == pytest.approx(200 / misses.CLK_TCK)


@pytest.fixture
def cgroup() -> Iterator[Path]:
    top = misses.CPUACCT[0]
    if os.geteuid() != 0 or not top.is_dir():
        pytest.skip("needs root and the cgroup v1 cpuacct hierarchy")
    d = top / f"ctbmiss{secrets.token_hex(3)}"
    d.mkdir()
    try:
        yield d
    finally:
        deadline = time.monotonic() + 10
        while True:
            try:
                d.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def _busy(tmp: Path, name: str, cgroup: Path) -> subprocess.Popen[bytes]:
    """A CPU-bound program whose command name is ``name`` (a copy of yes(1)), in the cgroup."""
    exe = tmp / name
    shutil.copy2("/usr/bin/yes", exe)
    proc = subprocess.Popen([str(exe)], stdout=subprocess.DEVNULL)
    (cgroup / "cgroup.procs").write_text(f"{proc.pid}\n")
    return proc


def _window(counter: misses.Counter, cgroup: Path, prof: misses.Profiles, secs: float) -> Counts:
    before = Counts(int(counter.instructions), int(counter.llc_misses))
    time.sleep(secs)
    counter.tick(misses.read_procs(misses.cgroup_pids(cgroup)), prof)
    after = Counts(int(counter.instructions), int(counter.llc_misses))
    return Counts(after.instructions - before.instructions, after.llc_misses - before.llc_misses)


def test_a_running_devil_reads_high_and_the_same_devil_stopped_reads_nothing(
    cgroup: Path, tmp_path: Path
) -> None:
    prof = misses.parse_profiles(PROFILE)
    devil = _busy(tmp_path, "streamdevil", cgroup)
    turtle: subprocess.Popen[bytes] | None = None
    try:
        counter = misses.Counter()
        counter.tick(misses.read_procs(misses.cgroup_pids(cgroup)), prof, first=True)
        running = _window(counter, cgroup, prof, 1.0)
        assert running.instructions > 0.05 * 1e9  # it had some CPU on a shared machine
        assert mpki(Counts(0, 0), running) == pytest.approx(30.0, rel=0.01)
        os.kill(devil.pid, signal.SIGSTOP)
        time.sleep(0.2)  # let the stop take effect before the window starts
        counter.tick(misses.read_procs(misses.cgroup_pids(cgroup)), prof)
        stopped = _window(counter, cgroup, prof, 1.0)
        assert stopped == Counts(0, 0)  # no CPU time: nothing counted, intensity 0
        assert mpki(Counts(0, 0), stopped) == 0.0
        # a turtle beside the stopped devil: the mix is the turtle's profile
        turtle = _busy(tmp_path, "yes", cgroup)
        mixed = _window(counter, cgroup, prof, 1.0)
        assert mpki(Counts(0, 0), mixed) == pytest.approx(0.2, rel=0.01)
        # the devil again: its CPU time since the stop counts, not before
        os.kill(devil.pid, signal.SIGCONT)
        both = _window(counter, cgroup, prof, 1.0)
        assert 0.2 < mpki(Counts(0, 0), both) < 30.0
    finally:
        for p in (devil, turtle):
            if p is not None:
                p.kill()
                p.wait(timeout=10)
