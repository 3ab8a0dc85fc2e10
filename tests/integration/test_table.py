"""The table `up` prints (racks, hosts, BMC ports, containers, IPs, LXC and Slurm states)
read back and checked against the machine: the namespaces, the process that owns each
BMC port, the address inside each container, lxc-info from the host's netns, sinfo.

The expected rows come from the topology's numbers and the naming rules of
docs/testbed.md (rRhHcC, 10.213.R.(100+10(H-1)+C), BMC port base + host index), not
from the testbed's own code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from . import tb

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

COLUMNS = ["RACK", "HOST", "NETNS", "BMC", "WATTS", "CONTAINER", "IP", "LXC", "SLURM"]


def parse_table(text: str) -> tuple[str, list[dict[str, str]]]:
    """Split the printed table into its head line and one dict per container row."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("head: "), text
    at = next((i for i, ln in enumerate(lines) if ln.split() == COLUMNS), None)
    assert at == 1, f"no header row {COLUMNS} under the head line:\n{text}"
    rows = []
    for ln in lines[at + 1 :]:
        assert not ln.startswith("problems:"), f"up printed problems:\n{text}"
        cells = ln.split()
        assert len(cells) == len(COLUMNS), f"row with {len(cells)} cells: {ln!r}"
        rows.append(dict(zip(COLUMNS, cells, strict=True)))
    return lines[0], rows


def expected_rows(topo: dict[str, Any]) -> list[dict[str, str]]:
    """The static columns of every row, from the topology's numbers alone."""
    rows = []
    index = 0
    for r in range(1, topo["racks_n"] + 1):
        for h in range(1, topo["hosts_per_rack"] + 1):
            host = f"r{r}h{h}"
            for c in range(1, topo["containers_per_host"] + 1):
                rows.append(
                    {
                        "RACK": f"r{r}",
                        "HOST": host,
                        "NETNS": f"ctb-{host}",
                        "BMC": f"{topo['net_prefix']}.251.{10 + index}:"
                        f"{topo['bmc_base_port'] + index}",
                        "CONTAINER": f"{host}c{c}",
                        "IP": f"{topo['net_prefix']}.{r}.{100 + 10 * (h - 1) + c}",
                    }
                )
            index += 1
    return rows


def _static(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    keep = ("RACK", "HOST", "NETNS", "BMC", "CONTAINER", "IP")
    return [{k: row[k] for k in keep} for row in rows]


def _udp_owner(addr: str, port: int) -> list[str]:
    """Command line of the process bound to addr:port (UDP) in the management netns."""
    out = tb.run(["nsenter", "--net=/run/netns/ctb-mgmt", "--",
                  "ss", "-H", "-u", "-l", "-n", "-p", f"sport = :{port}"])  # fmt: skip
    pids = set(re.findall(r"pid=(\d+)", out))
    assert len(pids) == 1, f"UDP port {port}: expected one owner, ss says:\n{out}"
    (pid,) = pids
    assert f"{addr}:{port} " in out, out
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")


def _lxc_state(netns: str, container: str) -> str:
    return tb.run(
        ["nsenter", f"--net=/run/netns/{netns}", "--", "lxc-info", "-n", container,
         "-P", str(tb.RUN_DIR / "lxc"), "-s", "-H"]
    ).strip()  # fmt: skip


def _sinfo() -> dict[str, str]:
    out = tb.slurm(["sinfo", "-N", "-h", "-o", "%N %T"])
    return dict(line.split() for line in out.splitlines() if line.strip())


def test_up_table_matches_topology_and_machine(testbed: dict[str, Any]) -> None:
    topo = testbed["topology"]
    head, rows = parse_table(testbed["up_stdout"])
    assert f"netns ctb-core ip {topo['net_prefix']}.0.1 " in head, head
    assert f"tbf {topo['core_rate_mbit']} Mbit/s" in head, head
    criu = head.split("criu: ", 1)[1].strip()
    assert "Version: 4.2.1" in tb.run([criu, "--version"]), criu
    assert _static(rows) == expected_rows(topo)
    # up returns once every node is idle: the table says so for every row
    assert {r["SLURM"] for r in rows} == {"idle"}, rows
    assert {r["LXC"] for r in rows} == {"RUNNING"}, rows

    netns = {p.name for p in Path("/run/netns").iterdir()}
    power = topo["power"]
    for row in rows:
        assert row["NETNS"] in netns
        # the container is reachable from that host netns only (LXC's abstract
        # sockets belong to a netns), so RUNNING there places it on that host
        assert _lxc_state(row["NETNS"], row["CONTAINER"]) == "RUNNING", row
        shown = tb.lxc_attach(row["CONTAINER"], "ip -4 -o addr show dev eth0")
        assert f" {row['IP']}/24 " in shown, (row, shown)
        # the BMC port is served by ipmi_sim with that host's own configuration
        addr, port = row["BMC"].rsplit(":", 1)
        argv = _udp_owner(addr, int(port))
        assert Path(argv[0]).name == "ipmi_sim", argv
        assert f"/bmc/{row['HOST']}/lan.conf" in " ".join(argv), argv
        # watts at up time: a powered host, idle or starting (at most its cores busy)
        watts = int(row["WATTS"])
        busiest = power["idle_w"] + power["per_core_w"] * topo["containers_per_host"]
        assert power["idle_w"] <= watts <= busiest, row


def test_status_table_states_are_live(testbed: dict[str, Any]) -> None:
    """The same table from `status` now: LXC, Slurm and watts as the machine says."""
    topo = testbed["topology"]
    power = topo["power"]
    _, rows = parse_table(tb.tb("status").stdout)
    assert _static(rows) == expected_rows(topo)
    slurm = _sinfo()
    assert {r["CONTAINER"]: r["SLURM"] for r in rows} == slurm
    hosts = {h["name"]: h for h in testbed["hosts"]}
    seen = set()
    for row in rows:
        assert row["LXC"] == _lxc_state(row["NETNS"], row["CONTAINER"])
        if row["HOST"] in seen:
            continue
        seen.add(row["HOST"])
        # the table's watts and the BMC's DCMI reading agree (both idle, a second
        # apart at most: within half a core's worth)
        dcmi = tb.dcmi_watts(hosts[row["HOST"]])
        assert abs(int(row["WATTS"]) - dcmi) <= 0.5 * power["per_core_w"], (row, dcmi)
    assert len(seen) == topo["racks_n"] * topo["hosts_per_rack"]
