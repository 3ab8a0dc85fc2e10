"""Live migration cost (issue 14): frozen and total time of a move against the memory a
node container has touched, with and without pre-copy, beside the link's floor.

    python bench/migration/migration_bench.py [--sizes 64,256,1024] [--runs 3]
        [--precopy-rounds 4] [--rate-mbit 100] [--no-write]

Root only. Self-contained, so it never waits for or disturbs the shared testbed: two
network namespaces of its own (two "hosts", joined by a veth pair rate-limited with tbf
like the testbed's rack uplinks, 100 Mbit/s), one LXC container built as the testbed's
node containers are (its cached root filesystem, /usr and /etc bound read-only, the
testbed's CRIU 4.2.1; `clavis-testbed up` must have run once to fill the cache) but
without network devices or slurmd, and one clavis-migrator agent per namespace. In the
container tests/integration/memhog.py touches SIZE MiB and rewrites 5% of it every second
(a hot set: the "< 10% per second" of the issue), checking its own memory. The container
moves back and forth; each move is one sample, first without pre-copy, then with it.
Frozen and total time and bytes are the agents' own step status (frozen_s: final dump to
verified restore on the target; seconds: the whole step). The floor is SIZE over the
link's rate, measured with a plain TCP stream between the two namespaces. After every
move the memhog must run on and report no bad page. Results: bench/results/migration.json
and the migration section of docs/benchmarks.md; medians of the runs.
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
from report import machine, write_json, write_section  # noqa: E402

CACHE = Path(os.environ.get("CLAVIS_CACHE", "/var/cache/clavis"))
ROOTFS = CACHE / "rootfs-1"
CRIU = CACHE / "criu-4.2.1" / "criu"
NODE = "mbench1"
HOSTS = ("mb-a", "mb-b")  # netns, veth and agent names
IPS = {"mb-a": "10.251.0.1", "mb-b": "10.251.0.2"}
PORT = 7781
SECRET = b"clavis-migration-bench-secret-0123"
HOT = 0.05  # share of its memory the container rewrites per second
STATE = "/tmp/memhog.state"
SECTION = "migration-bench"
LINK_PORT = 7799
LINK_BYTES = 16 * 2**20


class BenchError(Exception):
    """A move that cannot be measured; the message says why."""


def run(argv: list[str], timeout: float = 120) -> str:
    cp = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        check=False,
    )  # fmt: skip
    if cp.returncode != 0:
        raise BenchError(f"{' '.join(argv)} exited {cp.returncode}: {cp.stderr.strip()[-800:]}")
    return cp.stdout


def _ns(host: str) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{host}", "--"]


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


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
_SEND_BYTES = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
c.sendall(bytes(int(sys.argv[3]))); c.close()
"""
# a step sent as clavisd sends it (its own client, signed)
_SEND_STEP = """
import sys
from pathlib import Path
from clavis.service.agents import MigratorClient
from clavis_contracts import MigrationStep
secret, address, host, what, arg = Path(sys.argv[1]).read_bytes(), *sys.argv[2:6]
c = MigratorClient(secret, address, 30.0)
st = c.send(MigrationStep.model_validate_json(arg)) if what == "send" else c.status(host, arg)
print(st.model_dump_json())
"""


def link_rate(src: str, dst: str) -> float:
    """Bytes per second of one TCP stream from ``src``'s netns to ``dst``'s."""
    recv = subprocess.Popen(
        [*_ns(dst), sys.executable, "-c", _RECV, IPS[dst], str(LINK_PORT)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert recv.stdout is not None
        if recv.stdout.readline().strip() != "ready":
            raise BenchError("link receiver did not start")
        run([*_ns(src), sys.executable, "-c", _SEND_BYTES, IPS[dst], str(LINK_PORT),
             str(LINK_BYTES)])  # fmt: skip
        n, secs = recv.communicate(timeout=120)[0].split()
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait(10)
    return int(n) / float(secs)


class World:
    """The two namespaces, the container's two lxcpaths, the agents; all removed at the end."""

    def __init__(self, root: Path, rate_mbit: int) -> None:
        self.root = root
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.netns: list[str] = []
        for h in HOSTS:
            run(["ip", "netns", "add", h])
            self.netns.append(h)
            run(["ip", "-n", h, "link", "set", "lo", "up"])
        run(["ip", "link", "add", HOSTS[0], "netns", HOSTS[0], "type", "veth",
             "peer", "name", HOSTS[1], "netns", HOSTS[1]])  # fmt: skip
        for h in HOSTS:
            run(["ip", "-n", h, "addr", "add", f"{IPS[h]}/24", "dev", h])
            run(["ip", "-n", h, "link", "set", h, "up"])
            run(["tc", "-n", h, "qdisc", "add", "dev", h, "root", "tbf", "rate",
                 f"{rate_mbit}mbit", "burst", "64kb", "latency", "100ms"])  # fmt: skip
        self.secret = root / "secret"
        self.secret.write_bytes(SECRET)
        self.secret.chmod(0o600)
        for h in HOSTS:
            d = self.lxcpath(h) / NODE
            d.mkdir(parents=True)
            (d / "config").write_text(self._config())
        (root / "var").mkdir()

    def lxcpath(self, host: str) -> Path:
        return self.root / "lxc" / host

    def _config(self) -> str:
        # as the testbed's node containers (deploy/testbed/ctb/containers.py), without a
        # network device: CRIU and LXC see the same mounts, cgroups and limits
        return "\n".join([
            f"lxc.uts.name = {NODE}",
            f"lxc.rootfs.path = dir:{ROOTFS}",
            "lxc.init.cmd = /bin/sleep infinity",
            "lxc.signal.halt = SIGKILL",
            "lxc.tty.max = 0", "lxc.pty.max = 0", "lxc.console.path = none",
            "lxc.autodev = 1",
            "lxc.mount.auto = proc:mixed sys:mixed cgroup:mixed",
            "lxc.mount.entry = /usr usr none ro,bind 0 0",
            "lxc.mount.entry = /etc etc none ro,bind 0 0",
            f"lxc.mount.entry = {self.root / 'var'} var none rw,bind 0 0",
            "lxc.mount.entry = tmpfs run tmpfs rw,nosuid,nodev,mode=0755,size=64m 0 0",
            "lxc.mount.entry = tmpfs tmp tmpfs rw,nosuid,nodev,size=64m 0 0",
            f"lxc.mount.entry = {ROOT / 'tests' / 'integration'} mnt none ro,bind 0 0",
            "lxc.cgroup.cpuset.cpus = 1",
            f"lxc.cgroup.memory.limit_in_bytes = {3 * 2**30}",
            "lxc.net.0.type = empty",
            "",
        ])  # fmt: skip

    def lxc(self, host: str, cmd: str, *args: str, timeout: float = 120) -> str:
        return run([*_ns(host), cmd, "-n", NODE, "-P", str(self.lxcpath(host)), *args], timeout)

    def state(self, host: str) -> str:
        try:
            return self.lxc(host, "lxc-info", "-s", "-H").strip()
        except BenchError:
            return "ABSENT"

    def where(self) -> str:
        running = [h for h in HOSTS if self.state(h) == "RUNNING"]
        if len(running) != 1:
            raise BenchError(f"{NODE} runs on {running}, expected exactly one host")
        return running[0]

    def attach(self, host: str, shell: str) -> str:
        return self.lxc(host, "lxc-attach", "--", "sh", "-c", shell)

    def start_agents(self, precopy_rounds: int) -> None:
        self.stop_agents()
        for h in HOSTS:
            cfg = self.root / f"{h}.toml"
            cfg.write_text(
                f'host = "{h}"\nlisten = "{IPS[h]}"\nport = {PORT}\n'
                f'secret_file = "{self.secret}"\nstate_dir = "{self.root / "state" / h}"\n'
                f"cores = 4\nmemory_bytes = {8 * 2**30}\npeer_timeout_s = 120.0\n"
                f"precopy_rounds = {precopy_rounds}\n"
                f'[lxc]\nlxcpath = "{self.lxcpath(h)}"\ncriu = "{CRIU}"\nannounce = false\n'
            )
            log = open(self.root / f"{h}.log", "ab")  # noqa: SIM115 (kept by the agent)
            self.agents[h] = subprocess.Popen(
                [*_ns(h), sys.executable, "-m", "clavis_migrator", "--config", str(cfg)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            )  # fmt: skip
            log.close()
            deadline = time.monotonic() + 30
            while f":{PORT} " not in run(["ss", "-N", h, "-ltn"]):
                if self.agents[h].poll() is not None or time.monotonic() > deadline:
                    raise BenchError(f"agent {h} did not start: {self.log(h)}")
                time.sleep(0.2)

    def log(self, host: str) -> str:
        return (self.root / f"{host}.log").read_text(errors="replace")[-3000:]

    def stop_agents(self) -> None:
        for p in self.agents.values():
            if p.poll() is None:
                p.terminate()
        for p in self.agents.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self.agents = {}

    def client(self, host: str, what: str, arg: str) -> dict[str, Any]:
        out = run(
            [*_ns(host), sys.executable, "-c", _SEND_STEP, str(self.secret),
             f"{IPS[host]}:{PORT}", host, what, arg]
        )  # fmt: skip
        doc: dict[str, Any] = json.loads(out)
        return doc

    def close(self) -> None:
        self.stop_agents()
        for h in HOSTS:
            if self.state(h) == "RUNNING":
                try:
                    self.lxc(h, "lxc-stop", "-k")
                except BenchError as exc:
                    print(f"cleanup: {exc}", file=sys.stderr)
        for h in self.netns:
            subprocess.run(["ip", "netns", "del", h], check=False, timeout=30)


def _hog_state(w: World, host: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(w.attach(host, f"cat {STATE}"))
    return doc


def _hog_alive(w: World, host: str) -> dict[str, Any]:
    """The memhog's state once it ticked again; BenchError if it stopped or saw a bad page."""
    first = _hog_state(w, host)
    deadline = time.monotonic() + 30
    while True:
        now = _hog_state(w, host)
        if now["bad"]:
            raise BenchError(f"memhog on {host}: {now['bad']}")
        if now["ticks"] >= first["ticks"] + 2:
            return now
        if time.monotonic() > deadline:
            raise BenchError(f"memhog on {host} does not tick: {now}")
        time.sleep(0.2)


def _start_hog(w: World, host: str, mib: int) -> None:
    w.attach(
        host,
        f"rm -f {STATE}; setsid python3 /mnt/memhog.py {mib} {HOT} {STATE} "
        f"</dev/null >/dev/null 2>&1 & "
        f"for i in $(seq 600); do [ -f {STATE} ] && break; sleep 0.1; done",
    )
    _hog_alive(w, host)


def _stop_hog(w: World, host: str) -> None:
    w.attach(host, f"[ -f {STATE}.pid ] && kill $(cat {STATE}.pid); rm -f {STATE}*; true")


_ROUND = re.compile(r"pre-copy round (\d+): dumped in ([\d.]+) s while running, (\d+) bytes")
_FINAL = re.compile(r"checkpointed on \S+; (\d+) bytes sent")


def one_move(w: World, plan: int, mode: str) -> dict[str, Any]:
    src = w.where()
    dst = HOSTS[1] if src == HOSTS[0] else HOSTS[0]
    load = load_average()
    st = {
        "step_id": f"{plan}:0", "plan": plan, "index": 0, "wave": 0, "container": NODE,
        "source": src, "target": dst, "target_address": f"{IPS[dst]}:{PORT}",
        "memory_bytes": 2**30, "cores": 1, "deadline_s": 900,
    }  # fmt: skip
    w.client(src, "send", json.dumps(st))
    deadline = time.monotonic() + 900
    while True:
        done = w.client(src, "status", f"{plan}:0")
        if done["state"] in ("done", "failed", "rolled_back"):
            break
        if time.monotonic() > deadline:
            raise BenchError(f"move {plan} not finished: {done}")
        time.sleep(0.5)
    if done["state"] != "done":
        raise BenchError(f"move {plan} {src}->{dst} ({mode}): {done['state']}: {done['message']}")
    if w.where() != dst:
        raise BenchError(f"move {plan}: {NODE} is not running on {dst} only")
    _hog_alive(w, dst)
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


def render(res: dict[str, Any]) -> str:
    m = res["machine"]
    rate = res["link_bytes_per_s"]
    lines = [
        "## Live migration (`bench/migration/migration_bench.py`)",
        "",
        "One LXC container built like the testbed's node containers (its root filesystem, "
        "CRIU 4.2.1, cpuset and memory limit; no slurmd, no network device) moved back and "
        "forth by two clavis-migrator agents in two network namespaces of the bench's own, "
        f"joined by a veth pair limited to {res['rate_mbit']} Mbit/s with tbf (as the "
        "testbed's rack uplinks), while `tests/integration/memhog.py` in it holds SIZE MiB "
        f"of touched memory and rewrites {HOT:.0%} of it every second (a hot set), checking "
        "every page it wrote; it ran on unharmed after every move. Frozen: the step "
        "status's `frozen_s` (final dump to verified restore on the target); total: the "
        "whole step. Floor: SIZE over the link rate, "
        f"{rate * 8 / 1e6:.1f} Mbit/s ({rate / 2**20:.1f} MiB/s, median of "
        f"{len(res['link_samples'])} timed {LINK_BYTES // 2**20} MiB TCP streams between "
        "the namespaces). Pre-copy: "
        f"`precopy_rounds = {res['precopy_rounds_cap']}` (docs/migrator.md, "
        '"Pre-copy"); each of its rounds pauses the container for a full dump (round '
        f"pause). Medians of {res['runs']} moves per cell.",
        "",
        "| memory | floor | frozen, no pre-copy | x floor | total | frozen, pre-copy | "
        "cut | total | rounds | final bytes | max round pause |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for sz in res["sizes"]:
        p, q = sz.get("plain", {}), sz.get("precopy", {})
        lines.append(
            f"| {sz['size_mib']} MiB | {sz['floor_s']} s | {p.get('frozen_s')} s | "
            f"{p.get('frozen_over_floor')} | {p.get('total_s')} s | {q.get('frozen_s')} s | "
            f"{sz.get('precopy_frozen_cut', 0):.0%} | {q.get('total_s')} s | "
            f"{q.get('precopy_rounds')} | {q.get('final_bytes', 0) / 2**20:.1f} MiB | "
            f"{q.get('max_round_pause_s')} s |"
        )
    lines += ["", *verdicts(res["sizes"])]
    lines += [
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Python "
        f"{m['python']}, {res['date']}; load average before the moves "
        f"{res['load_min']:.1f}-{res['load_max']:.1f} (other sessions share the 2 "
        "cores). Command (as root): `make bench-migration` (`python "
        "bench/migration/migration_bench.py "
        f"--sizes {','.join(str(sz['size_mib']) for sz in res['sizes'])} "
        f"--runs {res['runs']}`); raw results in `bench/results/migration.json`.",
    ]
    return "\n".join(lines)


def verdicts(sizes: list[dict[str, Any]]) -> list[str]:
    """Issue 14's two targets, checked per size from the medians."""
    out = []
    for sz in sizes:
        p, q = sz.get("plain"), sz.get("precopy")
        if p is None or q is None:
            continue
        ok1 = p["frozen_over_floor"] <= 2.0
        ok2 = sz["precopy_frozen_cut"] >= 0.5
        out.append(
            f"- {sz['size_mib']} MiB: frozen without pre-copy {p['frozen_over_floor']}x the "
            f"floor (target <= 2x: {'met' if ok1 else 'NOT met'}); pre-copy cuts it by "
            f"{sz['precopy_frozen_cut']:.0%} (target >= 50%: {'met' if ok2 else 'NOT met'})."
        )
    return out


def bench(args: argparse.Namespace) -> dict[str, Any]:
    for need in (ROOTFS, CRIU):
        if not need.exists():
            raise BenchError(f"{need} missing: run `clavis-testbed up` once to build the cache")
    root = Path(tempfile.mkdtemp(prefix="clavis-migration-bench."))
    samples: list[dict[str, Any]] = []
    sizes: list[dict[str, Any]] = []
    plan = 500
    w = World(root, args.rate_mbit)
    try:
        rates = [link_rate(HOSTS[0], HOSTS[1]) for _ in range(3)]
        rate = statistics.median(rates)
        print(f"link {HOSTS[0]}->{HOSTS[1]}: {rate * 8 / 1e6:.1f} Mbit/s", flush=True)
        w.lxc(HOSTS[0], "lxc-start", "-d")
        for mib in args.sizes:
            host = w.where()
            _start_hog(w, host, mib)
            rows: list[dict[str, Any]] = []
            for mode, cap in (("plain", 0), ("precopy", args.precopy_rounds)):
                w.start_agents(cap)
                for _ in range(args.runs):
                    plan += 1
                    row = one_move(w, plan, mode)
                    row["size_mib"] = mib
                    print(json.dumps(row), flush=True)
                    rows.append(row)
            w.stop_agents()
            _stop_hog(w, w.where())
            samples += rows
            sizes.append(summarise(mib, rate, rows))
            print(json.dumps(sizes[-1]), flush=True)
            if not args.no_write:  # each size as it completes: a long run keeps what it has
                publish(result(args, rate, rates, sizes, samples))
    finally:
        w.close()
        shutil.rmtree(root, ignore_errors=True)
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
        "kernel": os.uname().release,
        "hot_fraction_per_s": HOT,
        "runs": args.runs,
        "rate_mbit": args.rate_mbit,
        "precopy_rounds_cap": args.precopy_rounds,
        "link_bytes_per_s": round(rate),
        "link_samples": [round(r) for r in rates],
        "load_min": min(loads),
        "load_max": max(loads),
        "sizes": sizes,
        "samples": samples,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--sizes", default="64,256,1024", help="MiB touched, comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="moves per size and mode")
    ap.add_argument("--precopy-rounds", type=int, default=4)
    ap.add_argument("--rate-mbit", type=int, default=100, help="the link between the hosts")
    ap.add_argument("--no-write", action="store_true", help="print, do not write results")
    args = ap.parse_args()
    try:
        args.sizes = [int(x) for x in args.sizes.split(",")]
    except ValueError:
        args.sizes = []
    if not args.sizes or any(x < 1 or x > 2048 for x in args.sizes) or not 1 <= args.runs <= 20:
        print("migration_bench: sizes are 1..2048 MiB, runs 1..20", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("migration_bench: must run as root (namespaces, LXC, CRIU)", file=sys.stderr)
        return 2
    try:
        done = bench(args)
    except BenchError as exc:
        print(f"migration_bench: {exc}", file=sys.stderr)
        return 1
    print(render(done))
    if not args.no_write:
        publish(done)
    return 0


def publish(res: dict[str, Any]) -> None:
    write_json(ROOT / "bench" / "results" / "migration.json", res)
    write_section(ROOT / "docs" / "benchmarks.md", SECTION, render(res))


if __name__ == "__main__":
    sys.exit(main())
