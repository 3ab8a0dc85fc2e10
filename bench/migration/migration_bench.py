"""Live migration cost (issue 14): frozen and total time of a move against the memory a
node container has touched, with and without pre-copy, beside the link's floor.

    python bench/migration/migration_bench.py [--sizes 64,256,1024] [--runs 3]
        [--precopy-rounds 4] [--no-write]

Root only; holds the testbed tests' lock (tests/integration/conftest.py) and brings the
testbed up if it is down (and down again at the end). One Slurm node container
(r1h1c2) runs tests/integration/memhog.py: it touches SIZE MiB and rewrites 5% of it
every second (a hot set, the "< 10% per second" of the issue), checking its own memory.
Two clavis-migrator agents run in the netns of hosts r1h1 and r2h1 (different racks: the
link between them is the testbed's 100 Mbit/s rack uplink), and the container is moved
back and forth: each move is one sample, first without pre-copy, then with it. Frozen
time and bytes are the agents' own step status (frozen_s: dump to verified restore on
the target; seconds: the whole step). The floor is SIZE over the link's rate, which is
measured with a plain TCP stream between the two hosts' netns. After every move the
memhog must run on and report no bad page. Results: bench/results/migration.json and
the migration section of docs/benchmarks.md; medians of the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from report import machine, write_json, write_section  # noqa: E402
from testbed.testbed_bench import BenchError, load_average, take_lock  # noqa: E402

from tests.integration import tb  # noqa: E402
from tests.integration.migrators import Agents, attach, host_ip, lxc_state, step  # noqa: E402

NODE = "r1h1c2"
HOSTS = ("r1h1", "r2h1")  # one per rack: moves cross the rate-limited uplinks
HOOK = str(ROOT / "deploy" / "testbed" / "route-follow")
HOT = 0.05  # share of its memory the container rewrites per second
STATE = "/tmp/memhog.state"
LIMIT_LINE = "lxc.cgroup.memory.limit_in_bytes"
SECTION = "migration-bench"
LINK_PORT = 7799
LINK_BYTES = 16 * 2**20

_RECV = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); s.settimeout(60)
print("ready", flush=True)
c, _ = s.accept(); c.settimeout(60)
n, t0 = 0, None
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    if t0 is None:
        t0 = time.monotonic()
    n += len(b)
print(n, time.monotonic() - t0)
"""
_SEND = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
c.sendall(bytes(int(sys.argv[3]))); c.close()
"""


def _ns(host: str) -> list[str]:
    return ["nsenter", f"--net=/run/netns/ctb-{host}", "--"]


def link_rate(testbed: dict[str, Any], src: str, dst: str) -> float:
    """Bytes per second of one TCP stream from ``src``'s netns to ``dst``'s."""
    ip = host_ip(testbed, dst)
    recv = subprocess.Popen(
        [*_ns(dst), sys.executable, "-c", _RECV, ip, str(LINK_PORT)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert recv.stdout is not None
        if recv.stdout.readline().strip() != "ready":
            raise BenchError("link receiver did not start")
        subprocess.run(
            [*_ns(src), sys.executable, "-c", _SEND, ip, str(LINK_PORT), str(LINK_BYTES)],
            check=True, timeout=120,
        )  # fmt: skip
        n, secs = recv.communicate(timeout=120)[0].split()
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait(10)
    return int(n) / float(secs)


def _where() -> str:
    running = [h for h in HOSTS if lxc_state(NODE, h) == "RUNNING"]
    if len(running) != 1:
        raise BenchError(f"{NODE} runs on {running}, expected exactly one host")
    return running[0]


def _hog_state(host: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(attach(NODE, host, f"cat {STATE}"))
    return doc


def _hog_alive(host: str) -> dict[str, Any]:
    """The memhog's state once it ticked again; BenchError if it stopped or saw a bad page."""
    first = _hog_state(host)
    deadline = time.monotonic() + 30
    while True:
        now = _hog_state(host)
        if now["bad"]:
            raise BenchError(f"memhog on {host}: {now['bad']}")
        if now["ticks"] >= first["ticks"] + 2:
            return now
        if time.monotonic() > deadline:
            raise BenchError(f"memhog on {host} does not tick: {now}")
        time.sleep(0.2)


def _start_hog(testbed: dict[str, Any], host: str, mib: int) -> None:
    hog = Path(testbed["shared_dir"]) / "memhog.py"
    shutil.copy(ROOT / "tests" / "integration" / "memhog.py", hog)
    attach(
        NODE, host,
        f"rm -f {STATE}; setsid python3 {hog} {mib} {HOT} {STATE} </dev/null >/dev/null 2>&1 & "
        f"for i in $(seq 600); do [ -f {STATE} ] && break; sleep 0.1; done",
    )  # fmt: skip
    _hog_alive(host)


def _stop_hog(host: str) -> None:
    attach(NODE, host, f"[ -f {STATE}.pid ] && kill $(cat {STATE}.pid); rm -f {STATE}*; true")


def _set_limit(host: str, limit: int) -> None:
    """The node's memory limit, live and in its LXC config (a restore applies the config)."""
    conf = tb.RUN_DIR / "lxc" / NODE / "config"
    lines = [
        f"{LIMIT_LINE} = {limit}" if ln.startswith(LIMIT_LINE) else ln
        for ln in conf.read_text().splitlines()
    ]
    conf.write_text("\n".join(lines) + "\n")
    tb.run(
        [*_ns(host), "lxc-cgroup", "-n", NODE, "-P", str(tb.RUN_DIR / "lxc"),
         "memory.limit_in_bytes", str(limit)]
    )  # fmt: skip


def _original_limit() -> int:
    conf = tb.RUN_DIR / "lxc" / NODE / "config"
    for ln in conf.read_text().splitlines():
        if ln.startswith(LIMIT_LINE):
            return int(ln.split("=", 1)[1])
    return 0


_ROUND = re.compile(r"pre-copy round (\d+): dumped in ([\d.]+) s while running, (\d+) bytes")
_FINAL = re.compile(r"checkpointed on \S+; (\d+) bytes sent")


def one_move(agents: Agents, testbed: dict[str, Any], plan: int, mode: str) -> dict[str, Any]:
    src = _where()
    dst = HOSTS[1] if src == HOSTS[0] else HOSTS[0]
    load = load_average()
    agents.send(step(testbed, (plan, 0), NODE, src, dst))
    done = agents.wait(src, f"{plan}:0", timeout=900)
    if done["state"] != "done":
        raise BenchError(f"move {plan} {src}->{dst} ({mode}): {done['state']}: {done['message']}")
    if _where() != dst:
        raise BenchError(f"move {plan}: {NODE} is not running on {dst} only")
    _hog_alive(dst)
    rounds = [(int(k), float(p), int(b)) for k, p, b in _ROUND.findall(done["message"])]
    final = _FINAL.search(done["message"])
    return {
        "mode": mode,
        "from": src,
        "to": dst,
        "frozen_s": done["frozen_s"],
        "total_s": done["seconds"],
        "bytes_moved": done["bytes_moved"],
        "final_bytes": int(final.group(1)) if final else None,
        "precopy_rounds": done["precopy_rounds"],
        "round_pauses_s": [p for _, p, _ in rounds],
        "round_bytes": [b for _, _, b in rounds],
        "load_average_before": load,
    }


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(float(r[key]) for r in rows), 2)


def summarise(size_mib: int, rate: float, rows: list[dict[str, Any]]) -> dict[str, Any]:
    floor = size_mib * 2**20 / rate
    out: dict[str, Any] = {"size_mib": size_mib, "floor_s": round(floor, 2)}
    for mode in ("plain", "precopy"):
        rs = [r for r in rows if r["mode"] == mode]
        if not rs:
            continue
        out[mode] = {
            "runs": len(rs),
            "frozen_s": _median(rs, "frozen_s"),
            "total_s": _median(rs, "total_s"),
            "bytes_moved": int(statistics.median(r["bytes_moved"] for r in rs)),
            "final_bytes": int(statistics.median(r["final_bytes"] or 0 for r in rs)),
            "precopy_rounds": int(statistics.median(r["precopy_rounds"] for r in rs)),
            "max_round_pause_s": max(max(r["round_pauses_s"], default=0.0) for r in rs),
            "frozen_over_floor": round(_median(rs, "frozen_s") / floor, 2),
        }
    if "plain" in out and "precopy" in out:
        out["precopy_frozen_cut"] = round(
            1 - out["precopy"]["frozen_s"] / out["plain"]["frozen_s"], 2
        )
    return out


def render(result: dict[str, Any]) -> str:
    m = result["machine"]
    rate = result["link_bytes_per_s"]
    lines = [
        "## Live migration (`bench/migration/migration_bench.py`)",
        "",
        f"One Slurm node container (LXC, CRIU 4.2.1, slurmd and munged inside) moved between "
        f"hosts {HOSTS[0]} and {HOSTS[1]} of the testbed (different racks) by two "
        "clavis-migrator agents, back and forth, while `tests/integration/memhog.py` in it "
        f"holds SIZE MiB of touched memory and rewrites {HOT:.0%} of it every second (a hot "
        "set), checking every page it wrote; it ran on unharmed after every move. Frozen: "
        "the step status's `frozen_s` (final dump to verified restore on the target); "
        "total: the whole step. Floor: SIZE over the link rate, "
        f"{rate * 8 / 1e6:.1f} Mbit/s ({rate / 2**20:.1f} MiB/s, median of "
        f"{len(result['link_samples'])} timed {LINK_BYTES // 2**20} MiB TCP streams between "
        "the two hosts' netns: the testbed's 100 Mbit/s tbf rack uplinks). Pre-copy: "
        f"`precopy_rounds = {result['precopy_rounds_cap']}` (docs/migrator.md, "
        '"Pre-copy"); its rounds pause the container for each full dump (round pause). '
        f"Medians of {result['runs']} moves per cell.",
        "",
        "| memory | floor | frozen, no pre-copy | x floor | total | frozen, pre-copy | "
        "cut | total | rounds | final bytes | max round pause |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in result["sizes"]:
        p, q = s.get("plain", {}), s.get("precopy", {})
        lines.append(
            f"| {s['size_mib']} MiB | {s['floor_s']} s | {p.get('frozen_s')} s | "
            f"{p.get('frozen_over_floor')} | {p.get('total_s')} s | {q.get('frozen_s')} s | "
            f"{s.get('precopy_frozen_cut', 0):.0%} | {q.get('total_s')} s | "
            f"{q.get('precopy_rounds')} | {q.get('final_bytes', 0) / 2**20:.1f} MiB | "
            f"{q.get('max_round_pause_s')} s |"
        )
    lines += [
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Python "
        f"{m['python']}, {result['date']}; load average before the moves "
        f"{result['load_min']:.1f}-{result['load_max']:.1f} (other sessions share the 2 "
        "cores). Command (as root): `python bench/migration/migration_bench.py` "
        f"`--sizes {','.join(str(s['size_mib']) for s in result['sizes'])} "
        f"--runs {result['runs']}`; raw results in `bench/results/migration.json`.",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    brought_up = False
    st = tb.status()
    if not st.get("up"):
        cp = tb.tb("up", check=False, timeout=900)
        if cp.returncode != 0:
            raise BenchError(f"clavis-testbed up failed:\n{cp.stderr[-3000:]}")
        brought_up = True
        st = tb.status()
    testbed = st
    original = _original_limit()
    root = Path(tempfile.mkdtemp(prefix="clavis-migration-bench."))
    samples: list[dict[str, Any]] = []
    sizes: list[dict[str, Any]] = []
    plan = 500
    try:
        rates = [link_rate(testbed, HOSTS[0], HOSTS[1]) for _ in range(3)]
        rate = statistics.median(rates)
        print(f"link {HOSTS[0]}->{HOSTS[1]}: {rate * 8 / 1e6:.1f} Mbit/s", flush=True)
        for mib in args.sizes:
            host = _where()
            # room for the memhog beside slurmd, munged and a shell (the testbed's limit is 1 GiB)
            _set_limit(host, max(original, (mib + 512) * 2**20))
            _start_hog(testbed, host, mib)
            rows: list[dict[str, Any]] = []
            for mode, cap in (("plain", 0), ("precopy", args.precopy_rounds)):
                agents = Agents(
                    testbed, root / f"{mib}-{mode}", list(HOSTS), cores=3, hook=HOOK,
                    precopy_rounds=cap,
                )  # fmt: skip
                try:
                    for _ in range(args.runs):
                        plan += 1
                        row = one_move(agents, testbed, plan, mode)
                        row["size_mib"] = mib
                        print(json.dumps(row), flush=True)
                        rows.append(row)
                finally:
                    agents.stop()
            _stop_hog(_where())
            samples += rows
            sizes.append(summarise(mib, rate, rows))
            print(json.dumps(sizes[-1]), flush=True)
            if not args.no_write:  # each size as it completes: a long run keeps what it has
                publish(result(args, rate, rates, sizes, samples))
    finally:
        _home(testbed, root, original)
        shutil.rmtree(root, ignore_errors=True)
        if brought_up:
            tb.tb("down", check=False, timeout=600)
    return result(args, rate, rates, sizes, samples)


def result(
    args: argparse.Namespace,
    rate: float,
    rates: list[float],
    sizes: list[dict[str, Any]],
    samples: list[dict[str, Any]],
) -> dict[str, Any]:
    loads = [r["load_average_before"] for r in samples] or [0.0]
    return {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "hosts": list(HOSTS),
        "node": NODE,
        "hot_fraction_per_s": HOT,
        "runs": args.runs,
        "precopy_rounds_cap": args.precopy_rounds,
        "link_bytes_per_s": round(rate),
        "link_samples": [round(r) for r in rates],
        "load_min": min(loads),
        "load_max": max(loads),
        "sizes": sizes,
        "samples": samples,
    }


def _home(testbed: dict[str, Any], root: Path, limit: int) -> None:
    """The node back on its own host, without the memhog, with its own memory limit."""
    try:
        host = _where()
    except BenchError:
        return
    _stop_hog(host)
    if host != HOSTS[0]:
        a = Agents(testbed, root / "home", list(HOSTS), cores=8, hook=HOOK)
        try:
            a.send(step(testbed, (999, 0), NODE, host, HOSTS[0]))
            a.wait(host, "999:0", timeout=300)
        finally:
            a.stop()
    if limit and _where() == HOSTS[0]:
        _set_limit(HOSTS[0], limit)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="64,256,1024", help="MiB touched, comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="moves per size and mode")
    ap.add_argument("--precopy-rounds", type=int, default=4)
    ap.add_argument("--no-write", action="store_true", help="print, do not write results")
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if any(s < 1 for s in args.sizes) or not 1 <= args.runs <= 20:
        print("migration_bench: sizes must be >= 1 MiB and runs within 1..20", file=sys.stderr)
        return 2
    if not tb.is_root():
        print("migration_bench: must run as root (the testbed)", file=sys.stderr)
        return 2
    fd = take_lock()
    try:
        done = run(args)
    except BenchError as exc:
        print(f"migration_bench: {exc}", file=sys.stderr)
        return 1
    finally:
        os.close(fd)
    print(render(done))
    if not args.no_write:
        publish(done)
    return 0


def publish(res: dict[str, Any]) -> None:
    write_json(ROOT / "bench" / "results" / "migration.json", res)
    write_section(ROOT / "docs" / "benchmarks.md", SECTION, render(res))


if __name__ == "__main__":
    sys.exit(main())
