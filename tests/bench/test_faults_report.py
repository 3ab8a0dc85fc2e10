"""bench/migration/faults.py's reading of pytest's JUnit report: runs, times, failures."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _faults() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("faults_bench", BENCH / "migration" / "faults.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


# the shape pytest 8 writes (--junitxml): one testcase per parametrized run
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest"
errors="1" failures="1" skipped="1" tests="6" time="200.0">
<testcase classname="tests.integration.test_migrator_faults"
 name="test_target_disk_full[0]" time="30.5" />
<testcase classname="tests.integration.test_migrator_faults"
 name="test_target_disk_full[1]" time="41.0"><failure
 message="AssertionError: ({'state': 'failed'}&#10;second line">trace</failure></testcase>
<testcase classname="tests.integration.test_migrator_faults"
 name="test_target_disk_full[2]" time="32.0" />
<testcase classname="tests.integration.test_migrator_faults"
 name="test_source_agent_killed_after_the_dump[0]" time="5.0"><error
 message="fixture broke">trace</error></testcase>
<testcase classname="tests.integration.test_migrator_faults"
 name="test_link_between_the_hosts_cut_mid_transfer[0]" time="0.01"><skipped
 message="root"/></testcase>
<testcase classname="tests.integration.test_other" name="test_x[0]" time="9.0" />
</testsuite></testsuites>"""


def test_runs_times_and_first_failures_per_case() -> None:
    faults = _faults()
    cases = faults.parse_junit(JUNIT)
    disk = cases["test_target_disk_full"]
    assert disk.seconds == [30.5, 41.0, 32.0]
    assert disk.failures == ["AssertionError: ({'state': 'failed'}"]  # its first line
    killed = cases["test_source_agent_killed_after_the_dump"]
    assert killed.runs == 1 and killed.failures == ["fixture broke"]
    assert cases["test_link_between_the_hosts_cut_mid_transfer"].runs == 0  # skipped
    text = faults.table(cases)
    assert (
        "| target disk full | 3 | 2 | 32.0 s (30.5-41.0) | AssertionError: ({'state': 'failed'} |"
        in text
    )
    assert "| link between the hosts cut mid-transfer (back after" in text
    assert "starts over) | 0 | - | - | not run |" in text


def test_cases_not_run_keep_their_earlier_figures_and_date() -> None:
    faults = _faults()
    cases = faults.parse_junit(JUNIT)
    old = {
        "test_target_agent_killed_mid_transfer": {"seconds": [13.0, 14.5], "failures": []},
        "test_target_disk_full": {"seconds": [1.0], "failures": ["old"], "measured": "then"},
    }
    faults.merge(cases, old, "2026-11-25 00:08 UTC", {"test_target_disk_full"})
    kept = cases["test_target_agent_killed_mid_transfer"]
    assert kept.seconds == [13.0, 14.5] and kept.measured == "2026-11-25 00:08 UTC"
    assert cases["test_target_disk_full"].seconds == [30.5, 41.0, 32.0]  # run now
    assert "| 2 | 2 | 13.8 s (13.0-14.5) | - | 2026-11-25 00:08 UTC |" in faults.table(cases)


def test_the_clavisd_case_runs_from_the_demos_tests() -> None:
    faults = _faults()
    crash = "test_clavisd_killed_mid_step_finishes_its_plan_when_started_again"
    assert faults.pytest_args({crash}) == [faults.DEMO_TESTS, "-k", crash]
    both = faults.pytest_args({crash, "test_target_disk_full"})
    assert both == [
        faults.FAULT_TESTS,
        faults.DEMO_TESTS,
        "-k",
        f"{crash} or test_target_disk_full",
    ]
