"""clavis-monitor cost benchmark (issue 6): the real agent, 64 containers, 1 s interval.

    python bench/monitor/monitor_bench.py [--containers 64] [--seconds 300] [--interval 1]

Needs root. Everything is real and local: the containers are real cgroups (v1 cpuacct
and memory, and v2) with one process each, made the way the monitor's tests make them;
clavisd runs on loopback with its SQLite store; power comes from a real ipmi_sim BMC on
loopback (DCMI through ipmitool, as on a host with a LAN BMC); traffic is counted by the
monitor's real nftables table, in a network namespace the benchmark creates, where two
of the containers' processes exchange a trickle of UDP across a bridge. Perf counters
are unsupported on this machine, so the perf sampler only reports why, as on any
VM without a PMU. A scraper GETs /metrics every 15 s, as Prometheus would.

The agent is ``clavis-monitor`` started as a child process. Once a second the benchmark
reads, by its PID, the CPU time of all its threads (``/proc/PID/task/*/schedstat``,
nanoseconds), of the commands it ran and reaped (cutime + cstime of ``/proc/PID/stat``)
and of those still running (their own threads, recursively), and its RSS (VmRSS). The
first ``--warmup`` seconds (imports, nft install) are excluded. Results go to
bench/results/monitor.json and the monitor section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "monitor" / "tests"))
# The monitor tests' helpers (real cgroups, clavisd, ipmi_sim BMC, network namespaces).
from monitor_tests.bmc import Bmc  # type: ignore[import-not-found]
from monitor_tests.cgroups import CgroupSet  # type: ignore[import-not-found]
from monitor_tests.clavisd import (  # type: ignore[import-not-found]
    KEY,
    Clavisd,
    free_port,
    write_key_file,
)
from monitor_tests.netns import Net  # type: ignore[import-not-found]
from report import describe, machine, write_json, write_section

ROOT = Path(__file__).resolve().parents[2]

TARGET_CPU_PCT = 0.5
TARGET_RSS_MB = 60.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
SCRAPE_S = 15.0
UDP_PORT = 9999
# Container 0 sends 20 datagrams of 1000 bytes a second to container 1 (bridged, so the
# monitor's table counts them), container 1 receives them.
RECEIVE = (
    "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
    f"s.bind(('0.0.0.0',{UDP_PORT}))\nwhile True: s.recv(65535)\n"
)
SEND = (
    "import socket,sys,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
    f"while True:\n s.sendto(b'x'*1000,(sys.argv[1],{UDP_PORT})); time.sleep(0.05)\n"
)


def address(i: int) -> str:
    """Container i's address on the benchmark's bridge (10.77.1.0/24)."""
    return f"10.77.1.{11 + i}"


def topology(containers: int) -> str:
    """This host (h1) with the benchmark's containers, and as many remote containers on
    a host in the same rack and one in another rack."""
    out = ['[[hosts]]\nname = "h1"\nrack = "r1"\n', '[[hosts]]\nname = "h2"\nrack = "r1"\n',
           '[[hosts]]\nname = "h3"\nrack = "r2"\n']  # fmt: skip
    for i in range(containers):
        out.append(
            f'[[containers]]\nname = "n{i:03d}"\nhost = "h1"\naddresses = ["{address(i)}"]\n'
        )
        for host, net in (("h2", 2), ("h3", 3)):
            out.append(
                f'[[containers]]\nname = "{host}n{i:03d}"\nhost = "{host}"\n'
                f'addresses = ["10.77.{net}.{11 + i}"]\n'
            )
    return "\n".join(out)


def agent_config(tmp: Path, args: argparse.Namespace, *, clavisd: Clavisd, cs: CgroupSet,
                 net: Net, bmc: Bmc | None, metrics_port: int) -> Path:  # fmt: skip
    power = (
        f'methods = ["ipmi-dcmi"]\nbmc_host = "127.0.0.1"\nbmc_port = {bmc.port}\n'
        f'bmc_password_file = "{bmc.password_file}"\n'
        if bmc is not None
        else f'methods = ["rapl"]\nrapl_root = "{tmp / "no-rapl"}"\n'
    )
    text = (
        f'host = "h1"\ninterval_s = {args.interval}\n'
        f'[clavisd]\nurl = "{clavisd.url}"\nkey_file = "{write_key_file(tmp / "key.toml", KEY)}"\n'
        f'[spool]\ndir = "{tmp / "spool"}"\n'
        f'[registration]\nsocket = "{tmp / "monitor.sock"}"\n'
        f'[metrics]\nlisten = "127.0.0.1"\nport = {metrics_port}\n'
        f'[containers]\nscan_prefixes = ["{cs.prefix}"]\nlxc_paths = []\n'
        f'[traffic]\nnft = ["nsenter", "--net=/run/netns/{net.host}", "nft"]\n'
        f'topology_file = "{tmp / "topology.toml"}"\n'
        f"[power]\n{power}"
    )
    path = tmp / "monitor.toml"
    path.write_text(text)
    return path


# -- the agent's cost, read from /proc ------------------------------------------------------


def _stat_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree_cpu_ns(pid: int) -> int:
    """CPU time of a process: its threads (schedstat, ns), its reaped children (cutime +
    cstime) and its live children, recursively. 0 for a process that is gone."""
    try:
        reaped = _stat_fields(pid)[13:15]  # cutime, cstime (fields 16 and 17)
        total = (int(reaped[0]) + int(reaped[1])) * 1_000_000_000 // CLK_TCK
        tasks = os.listdir(f"/proc/{pid}/task")
    except (OSError, IndexError):
        return 0
    for tid in tasks:
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            kids = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
        except OSError:
            continue  # a thread that just ended: its time is in the process's own total
        total += sum(tree_cpu_ns(int(k)) for k in kids)
    return total


def tick_cpu_s(pid: int) -> float:
    """utime + stime + cutime + cstime of ``/proc/PID/stat`` (clock ticks): a coarse
    cross-check of ``tree_cpu_ns`` over the whole run."""
    f = _stat_fields(pid)
    return sum(int(x) for x in f[11:15]) / CLK_TCK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def scrape(port: int) -> dict[str, float]:
    """/metrics as {series: value} (labels kept in the series name)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            out[series] = float(value)
    return out


@dataclass
class RunFacts:
    """What the run ends with, besides the samples."""

    ticks_cpu_s: float
    final: dict[str, float]  # the last /metrics scrape
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    bmc: bool
    exit_code: int | None = None
    log_tail: list[str] = field(default_factory=list)
    stored: int = 0


@dataclass
class Samples:
    t: list[float] = field(default_factory=list)
    cpu_ns: list[int] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    scrapes: int = 0
    scrape_errors: list[str] = field(default_factory=list)


def measure(agent: subprocess.Popen[bytes], seconds: float, metrics_port: int) -> Samples:
    """One sample a second, on a fixed schedule; an agent that exits ends the run."""
    pid = agent.pid
    s = Samples()
    start = time.monotonic()
    next_scrape = start + SCRAPE_S
    k = 0
    while True:
        now = time.monotonic()
        if agent.poll() is not None:
            raise RuntimeError(f"the agent exited ({agent.returncode}) during the run")
        s.t.append(now)
        s.cpu_ns.append(tree_cpu_ns(pid))
        s.rss_mb.append(rss_mb(pid))
        if now >= next_scrape:
            next_scrape += SCRAPE_S
            try:
                scrape(metrics_port)
                s.scrapes += 1
            except OSError as exc:
                s.scrape_errors.append(str(exc))
        if now - start >= seconds:
            return s
        k += 1
        time.sleep(max(0.0, start + k - time.monotonic()))


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


# -- the run --------------------------------------------------------------------------------


def start_containers(cs: CgroupSet, net: Net, n: int) -> list[subprocess.Popen[bytes]]:
    """One process per container: the first two talk over the bridge in their own
    network namespaces, the others sleep."""
    rx = net.add_bridged("r", address(1))
    tx = net.add_bridged("t", address(0))
    procs = [
        subprocess.Popen(["nsenter", f"--net=/run/netns/{tx}", "--", sys.executable, "-c", SEND,
                          address(1)]),
        subprocess.Popen(["nsenter", f"--net=/run/netns/{rx}", "--", sys.executable, "-c",
                          RECEIVE]),
    ]  # fmt: skip
    procs += [subprocess.Popen(["sleep", "1000000"]) for _ in range(2, n)]
    for i, p in enumerate(procs):
        cs.enter(p.pid, f"n{i:03d}")
    return procs


def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> int | None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    return proc.returncode


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    names = [f"n{i:03d}" for i in range(args.containers)]
    with tempfile.TemporaryDirectory(prefix="clavis-monitor-bench-") as tmp_s:
        tmp = Path(tmp_s)
        clavisd = Clavisd(tmp)
        cs = CgroupSet(names)
        net = Net()
        bmc: Bmc | None = None
        procs: list[subprocess.Popen[bytes]] = []
        agent: subprocess.Popen[bytes] | None = None
        try:
            clavisd.start()
            if shutil.which("ipmi_sim") and not args.no_bmc:
                bmc = Bmc(tmp / "bmc").start(watts=180)
            net.up()
            cs.create()
            procs = start_containers(cs, net, args.containers)
            (tmp / "topology.toml").write_text(topology(args.containers))
            metrics_port = free_port()
            cfg = agent_config(
                tmp, args, clavisd=clavisd, cs=cs, net=net, bmc=bmc, metrics_port=metrics_port
            )
            exe = Path(sys.executable).parent / "clavis-monitor"
            with (tmp / "monitor.log").open("ab") as log:
                agent = subprocess.Popen(
                    [str(exe), "--config", str(cfg), "--log-level", "warning"],
                    stdout=log, stderr=subprocess.STDOUT,
                )  # fmt: skip
            print(f"agent pid {agent.pid}: {args.warmup:g} s warm-up, then "
                  f"{args.seconds:g} s measured", flush=True)  # fmt: skip
            time.sleep(args.warmup)
            if agent.poll() is not None:
                raise RuntimeError(f"agent exited: {(tmp / 'monitor.log').read_text()}")
            ticks0 = tick_cpu_s(agent.pid)
            samples = measure(agent, args.seconds, metrics_port)
            facts = RunFacts(
                ticks_cpu_s=tick_cpu_s(agent.pid) - ticks0,
                final=scrape(metrics_port),
                load_before=load_before,
                load_after=os.getloadavg(),
                bmc=bmc is not None,
            )
            facts.exit_code = stop(agent)
            facts.log_tail = (tmp / "monitor.log").read_text().strip().splitlines()[-5:]
            facts.stored = clavisd.stored_reports("h1")
        except BaseException:
            log_file = tmp / "monitor.log"
            if log_file.exists():  # the directory goes with the run: show the agent's last words
                print(log_file.read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            if agent is not None:
                stop(agent)
            for p in procs:
                p.kill()
                p.wait(timeout=10)
            cs.remove()
            net.down()
            if bmc is not None:
                bmc.stop()
            clavisd.stop()
    return summarise(args, samples, facts)


def summarise(args: argparse.Namespace, s: Samples, f: RunFacts) -> dict[str, Any]:
    per_s = [
        100 * (s.cpu_ns[i] - s.cpu_ns[i - 1]) / 1e9 / (s.t[i] - s.t[i - 1])
        for i in range(1, len(s.t))
    ]
    wall = s.t[-1] - s.t[0]
    cpu_s = (s.cpu_ns[-1] - s.cpu_ns[0]) / 1e9
    final = f.final
    built = final.get("clavis_monitor_reports_total", 0.0)
    states = sorted(k for k in final if k.startswith("clavis_monitor_sampler_state"))
    result = {
        "containers": args.containers, "interval_s": args.interval, "seconds": args.seconds,
        "warmup_s": args.warmup, "samples": len(per_s), "wall_s": round(wall, 1),
        "cpu_pct_median": round(statistics.median(per_s), 3),
        "cpu_pct_mean": round(100 * cpu_s / wall, 3),
        "cpu_pct_p90": round(pct(per_s, 0.90), 3),
        "cpu_pct_max": round(max(per_s), 3),
        "cpu_s": round(cpu_s, 3), "cpu_s_ticks": round(f.ticks_cpu_s, 2),
        "cpu_pct_median_per_10s": [
            round(statistics.median(per_s[i : i + 10]), 3) for i in range(0, len(per_s), 10)
        ],
        "rss_mb_median": round(statistics.median(s.rss_mb), 1),
        "rss_mb_peak": round(max(s.rss_mb), 1),
        "rss_mb_first": round(s.rss_mb[0], 1), "rss_mb_last": round(s.rss_mb[-1], 1),
        "reports_built": int(built),
        "reports_sent": int(final.get("clavis_monitor_reports_sent_total", 0.0)),
        "reports_stored": f.stored,
        "spool_reports_at_end": int(final.get("clavis_monitor_spool_reports", 0.0)),
        "scrapes": s.scrapes, "scrape_errors": s.scrape_errors[:5],
        "sampler_states": states,
        "power": (
            "from a real ipmi_sim BMC on loopback (DCMI power reading over RMCP+, through "
            "the agent's ipmitool shell)"
            if f.bmc
            else "not read (--no-bmc, or no ipmi_sim on this machine)"
        ),
        "agent_exit_code": f.exit_code, "agent_log_tail": f.log_tail,
        "load_average_before": [round(x, 2) for x in f.load_before],
        "load_average_after": [round(x, 2) for x in f.load_after],
        "target_cpu_pct": TARGET_CPU_PCT, "target_rss_mb": TARGET_RSS_MB,
    }  # fmt: skip
    result["cpu_met"] = result["cpu_pct_median"] <= TARGET_CPU_PCT
    result["rss_met"] = result["rss_mb_median"] <= TARGET_RSS_MB
    result["pass"] = bool(result["cpu_met"] and result["rss_met"] and f.exit_code == 0)
    return result


def section(r: dict[str, Any]) -> str:
    per10 = ", ".join(f"{v:.2f}" for v in r["cpu_pct_median_per_10s"])
    lb, la = r["load_average_before"], r["load_average_after"]
    return f"""## Monitor agent cost (`bench/monitor/monitor_bench.py`)

The real `clavis-monitor`, started as a child process, watches {r["containers"]} containers
(real cgroups in the v1 cpuacct and memory hierarchies and in v2, one process each) with a
{r["interval_s"]:g} s interval and reports to a real clavisd on loopback. Every sampler
runs as in production: each container's cgroup CPU time every interval (its limits and
Slurm job cgroups at each 10 s rescan); perf every interval (no PMU on this machine, so it
reports `unsupported` and why); nftables accounting every 5 s in a
network namespace the benchmark creates, where one container sends another
20 UDP datagrams a second over a bridge; power every 10 s {r["power"]};
/metrics scraped every 15 s. The agent's CPU time counts
all its threads (`/proc/PID/task/*/schedstat`, ns) and the commands it runs (nft,
nsenter, ipmitool: reaped ones from cutime/cstime, running ones from their own threads),
sampled every second by PID for {r["seconds"]:g} s after a {r["warmup_s"]:g} s warm-up.

{_table(r)}

CPU is a percent of one core (median and p90 of the one-second samples; mean = total CPU
time {r["cpu_s"]:.2f} s / {r["wall_s"]:g} s; the clock-tick count of `/proc/PID/stat` gives
{r["cpu_s_ticks"]:.2f} s). Median per 10 s: {per10}. Reports: {r["reports_built"]} built,
{r["reports_sent"]} sent, {r["reports_stored"]} stored by clavisd (including the warm-up),
{r["spool_reports_at_end"]} spooled at the end; agent exit code {r["agent_exit_code"]}.
Load average (1, 5, 15 min) {lb[0]:.2f} {lb[1]:.2f} {lb[2]:.2f} before,
{la[0]:.2f} {la[1]:.2f} {la[2]:.2f} after (other work shares the machine's cores).
{_notes(r)}
{describe(r["machine"])}
Command (as root): `{_command(r)}`; raw results in `bench/results/monitor.json`.
"""


def _command(r: dict[str, Any]) -> str:
    return (
        f"python bench/monitor/monitor_bench.py --containers {r['containers']} "
        f"--interval {r['interval_s']:g} --seconds {r['seconds']:g}"
    )


def _table(r: dict[str, Any]) -> str:
    def verdict(ok: bool) -> str:
        return "met" if ok else "**NOT met**"

    head = ("| containers | interval | CPU median | CPU mean | CPU p90 | CPU max (1 s) "
            "| RSS median | RSS peak | target |\n" + "|---" * 9 + "|")  # fmt: skip
    target = (
        f"CPU ≤ {r['target_cpu_pct']:g}% of one core: {verdict(r['cpu_met'])}; "
        f"RSS ≤ {r['target_rss_mb']:g} MB: {verdict(r['rss_met'])}"
    )
    cells = [
        str(r["containers"]), f"{r['interval_s']:g} s",
        *(f"{r[k]:.2f}%" for k in ("cpu_pct_median", "cpu_pct_mean", "cpu_pct_p90", "cpu_pct_max")),
        f"{r['rss_mb_median']:.1f} MB", f"{r['rss_mb_peak']:.1f} MB", target,
    ]  # fmt: skip
    return head + "\n| " + " | ".join(cells) + " |"


def _notes(r: dict[str, Any]) -> str:
    notes = list(r.get("notes") or [])
    if r["cpu_met"] and r["cpu_pct_mean"] > 0.9 * r["target_cpu_pct"]:
        verdict = "does not meet it" if r["cpu_pct_mean"] > r["target_cpu_pct"] else "is close"
        notes.insert(0, (
            f"The median meets the target; the mean ({r['cpu_pct_mean']:.2f}%) {verdict}: the "
            "seconds with a traffic reading (nft, every 5 s) or a power reading (every 10 s) "
            f"cost more (p90 {r['cpu_pct_p90']:.2f}%, max {r['cpu_pct_max']:.2f}%)."
        ))  # fmt: skip
    if not r["cpu_met"] or not r["rss_met"]:
        notes.insert(0, "**Target not met** (see the table).")
    return "\n" + "\n\n".join(notes) + "\n" if notes else ""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--containers", type=int, default=64)
    p.add_argument("--interval", type=float, default=1.0, help="the agent's interval_s")
    p.add_argument("--seconds", type=float, default=300.0, help="measured time")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds before measuring")
    p.add_argument("--no-bmc", action="store_true", help="no ipmi_sim BMC (power: none)")
    p.add_argument("--note", action="append", default=[], help="a line for the docs section")
    p.add_argument("--no-write", action="store_true", help="print only (for quick checks)")
    p.add_argument(
        "--render", action="store_true", help="rewrite the docs section from the saved results"
    )
    args = p.parse_args()
    results = ROOT / "bench" / "results" / "monitor.json"
    if args.render:
        saved = json.loads(results.read_text())
        saved["notes"] = args.note or saved.get("notes", [])
        write_json(results, saved)
        write_section(ROOT / "docs" / "benchmarks.md", "monitor-bench", section(saved))
        return 0
    if os.geteuid() != 0:
        print("monitor_bench: needs root (cgroups, network namespaces, nft)", file=sys.stderr)
        return 2
    if args.containers < 2 or args.containers > 200:
        print("monitor_bench: --containers must be within 2..200", file=sys.stderr)
        return 2
    result = run(args)
    result["notes"] = args.note
    result["machine"] = machine()
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))
    if not args.no_write:
        write_json(results, result)
        write_section(ROOT / "docs" / "benchmarks.md", "monitor-bench", section(result))
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
