"""clavis-testbed up|down|status|exec|checkpoint|restore|env (and the internal powerd, missd)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import (
    accounting,
    agents,
    bmc,
    chassis,
    cluster,
    containers,
    misses,
    mpi,
    net,
    paths,
    placement,
    power,
    powersave,
    slurm,
    stack,
)
from .proc import CommandError, in_netns, spawn, start_time, stop, stop_all
from .state import State, StateError, load
from .topology import Host, Topology, TopologyError
from .topology import load as load_topology

ENTRY = paths.HERE / "clavis-testbed"
EXIT_BAD_INPUT = 2
EXIT_NOT_UP = 3
# logs of a failed up survive its cleanup here (removed by the next successful down)
FAILED_LOGS = paths.RUN.parent / "clavis-testbed-failed-logs"


def _say(msg: str) -> None:
    print(f"clavis-testbed: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- health, teardown


def problems(st: State) -> list[str]:
    """Why a recorded testbed is not fully up (empty list = healthy)."""
    out = []
    present = net.existing_netns()
    out += [f"netns {n} missing" for n in net.netns_names(st.topology) if n not in present]
    out += [f"{p.what} (pid {p.pid}) not running" for p in st.processes if not p.alive()]
    for c in st.topology.containers():
        s = containers.state(c.name) if c.name in st.containers else "ABSENT"
        # a node Slurm suspended, or on a host powered off, is meant to be stopped
        if s != "RUNNING" and not (s == "STOPPED" and chassis.expected_down(c.name)):
            out.append(f"container {c.name} {s}")
    if st.phase != "up":
        out.append(f"phase is {st.phase!r}")
    return out


def _hierarchies() -> list[Path]:
    root = Path("/sys/fs/cgroup")
    return [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []


def _cgroup_dirs(names: list[str]) -> list[Path]:
    """LXC's cgroups for our containers, in every hierarchy."""
    found = []
    for h in _hierarchies():
        for n in names:
            for prefix in ("lxc.payload.", "lxc.monitor."):
                d = h / f"{prefix}{n}"
                if d.is_dir():
                    found.append(d)
    return found


def _pivots() -> list[Path]:
    """LXC's own helper cgroup 'lxc.pivot', which it creates on first start."""
    return [h / "lxc.pivot" for h in _hierarchies() if (h / "lxc.pivot").is_dir()]


def _procs(d: Path) -> set[int]:
    pids: set[int] = set()
    for f in d.rglob("cgroup.procs"):
        try:
            pids |= {int(x) for x in f.read_text().split()}
        except (OSError, ValueError):
            continue
    return pids


def _rmdir_tree(d: Path) -> None:
    """Remove a cgroup directory tree bottom-up (cgroupfs only allows rmdir)."""
    subdirs = sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
    for sub in [*subdirs, d]:
        with contextlib.suppress(OSError):
            sub.rmdir()


def _kill_cgroups(dirs: list[Path], within_s: float = 10.0) -> None:
    """Last resort when lxc-stop could not reach a container (e.g. its netns is gone):
    SIGKILL what is left in our containers' own cgroups, bounded in time (within_s 0:
    one round)."""
    deadline = time.monotonic() + within_s
    for _ in range(int(within_s / 0.1) + 1):
        pids = set().union(*(_procs(d) for d in dirs)) if dirs else set()
        live = {p for p in pids if start_time(p) is not None}
        if not live:
            return
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() >= deadline:
            return
        time.sleep(0.1)


def _stop_containers(st: State) -> list[str]:
    """Kill every container of the state (lxc-stop -k), then what is left in their
    cgroups; return errors."""
    errors: list[str] = []
    for name in reversed(st.containers):
        errors += containers.stop(name)
    _kill_cgroups(_cgroup_dirs(st.containers))
    return errors


def teardown(st: State) -> list[str]:
    """Remove exactly what the state lists; return what could not be removed."""
    errors: list[str] = []
    # while the stack runs, Slurm's power saving can resume a node we have just stopped
    # (clavisd -> node-power start -> lxc-start): from here on no container starts
    with contextlib.suppress(OSError):
        paths.GOING_DOWN.touch()
    errors += _stop_containers(st)
    # the stack's daemons (started last) first and together: none waits for another
    # (docs/testbed.md, "make demo"); then the others one by one, in reverse order
    mine = [p for p in st.processes if stack.ours(p)]
    stop_all(mine)
    for p in reversed(st.processes):
        if p not in mine:
            stop(p)
        if p.alive():
            errors.append(f"{p.what} (pid {p.pid}) survived SIGKILL")
    # a start already past the check when down began may have finished since: with every
    # process that could start one gone, stop what runs once more
    errors += _stop_containers(st)
    errors += net.destroy(st.netns)
    dirs = _cgroup_dirs(st.containers)
    if not st.pivot_existed:
        dirs += _pivots()
    for d in dirs:
        # the LXC monitor removes its cgroups as it exits; give it a moment
        for _ in range(50):
            _kill_cgroups([d], within_s=0.0)
            _rmdir_tree(d)
            if not d.exists():
                break
            time.sleep(0.1)
        if d.exists():
            errors.append(f"cgroup {d} could not be removed")
    if not errors:
        shutil.rmtree(paths.RUN, ignore_errors=True)
        shutil.rmtree(FAILED_LOGS, ignore_errors=True)
    return errors


# ---------------------------------------------------------------- up


def _ensure_criu() -> str:
    script = paths.HERE / "build-criu.sh"
    cp = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=1800, check=False
    )
    if cp.returncode != 0:
        raise CommandError(f"CRIU build failed: {cp.stderr.strip()[-2000:]}")
    return cp.stdout.strip().splitlines()[-1]


def _build(st: State, with_stack: bool) -> dict[str, str]:
    """Build the testbed (and with_stack the Clavis stack); return the stack's UI
    passwords (empty without it)."""
    topo = st.topology
    t0 = time.monotonic()
    st.criu = _ensure_criu()
    containers.build_rootfs()
    accounting.build_template()
    for d in (paths.ETC, paths.SHARED, paths.LOG, paths.LXC, paths.CONTAINERS, paths.BMC):
        d.mkdir(parents=True, exist_ok=True)
    paths.SHARED.chmod(0o1777)
    bmc.build_module()
    mpi.build()
    st.save()
    _say(f"artefacts ready ({time.monotonic() - t0:.1f}s); building network")

    net.build(topo, st.netns)
    st.save()

    # with power saving clavisd powers hosts off and on: one BMC password for all of
    # them, as [host_power] has one (powersave.py)
    shared = powersave.shared_bmc_password() if st.power_save else ""
    for host in topo.hosts():
        st.processes.append(bmc.start(topo, host, shared))
        st.save()
    st.processes.append(
        spawn("powerd", [sys.executable, str(ENTRY), "powerd"], paths.LOG / "powerd.log")
    )
    st.save()
    st.processes.append(
        spawn("missd", [sys.executable, str(ENTRY), "missd"], paths.LOG / "missd.log")
    )
    st.save()

    cluster.write(topo)
    slurm.write_munge_key()
    select = slurm.install_select()
    extra = powersave.slurm_lines(topo) if st.power_save else []
    if st.power_save:
        user = slurm.ensure_slurm_user()
        powersave.install_programs(user.pw_uid, user.pw_gid)
    slurm.write_conf(topo, select, extra)
    _say(slurm.select_line(select))
    containers.write_shared_files(topo)
    containers.write_criu_conf()
    slurm.start_head(topo, st.processes, st.save)

    cpusets = topo.cpusets(containers.machine_cpus())
    placement.init(topo)  # every node at home; migrations update it (placement.py)
    for c in topo.containers():
        containers.write_config(topo, c, cpusets[c.name])
        # every node sees its host's monitor socket (stack.py), with or without the
        # stack, so `up --stack` can add it to a running testbed
        stack.add_node_mount(c)
        st.containers.append(c.name)
        st.save()
        containers.start(c)
    for host in topo.hosts():
        bmc.wait_ready(host)
    slurm.wait_idle(topo, timeout=30)
    passwords = stack.start(st, _bmcs(topo)) if with_stack else {}
    st.phase = "up"
    st.up_seconds = round(time.monotonic() - t0, 1)
    st.save()
    _write_env(st)
    return passwords


def _bmcs(topo: Topology) -> dict[str, dict[str, Any]]:
    return {h.name: _bmc(h) for h in topo.hosts()}


def _add_stack(st: State) -> int:
    """`up --stack` on a healthy testbed without the stack: start it on top."""
    _say("starting the Clavis stack on the running testbed")
    try:
        passwords = stack.start(st, _bmcs(st.topology))
    except (CommandError, OSError, subprocess.TimeoutExpired) as exc:
        _say(f"the stack did not start: {exc}; logs are in {paths.LOG}")
        errors = stack.stop_stack(st)
        if errors:
            _say("could not stop: " + "; ".join(errors))
        return 1
    print(stack.passwords_text(passwords, st.topology))
    _print_table(st)
    return 0


def _write_env(st: State) -> None:
    lines = {
        "CLAVIS_TESTBED_STATE": str(paths.STATE),
        "CLAVIS_CRIU": st.criu,
        "CRIU_CONFIG_FILE": str(paths.CRIU_CONF),
        "SLURM_CONF": str(paths.SLURM_CONF),
        "CLAVIS_LXCPATH": str(paths.LXC),
        "CLAVIS_HEAD_NETNS": st.topology.core_netns,
    }
    if slurm.select_type() == slurm.CLAVIS:
        lines["CLAVIS_ADVICE"] = str(paths.ADVICE)
    paths.ENV_FILE.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))


def cmd_up(args: argparse.Namespace) -> int:
    topo = _topology_from_args(args)
    topo.cpusets(containers.machine_cpus())  # a TopologyError (exit 2) before building
    st = load()
    # a testbed that ran the stack gets it back when it is repaired
    # a repaired testbed keeps its power saving, as it keeps its stack
    power_save = bool(args.power_save) or (st is not None and st.power_save)
    with_stack = power_save or bool(args.stack) or (st is not None and stack.running(st))
    if st is not None and args.power_save and not st.power_save:
        _say("a testbed without power saving is up; run `clavis-testbed down` first")
        return EXIT_BAD_INPUT
    if st is not None:
        if st.topology != topo:
            if not problems(st):
                _say("a testbed with another topology is up; run `clavis-testbed down` first")
                return EXIT_BAD_INPUT
        elif not problems(st):
            if with_stack and not stack.running(st):
                return _add_stack(st)
            _say("already up")
            note = slurm.select_note(slurm.select_type())
            if note:
                _say(note)
            _print_table(st)
            return 0
        _say("removing the remains of an earlier, incomplete up")
        errors = teardown(st)
        if errors:
            _say("could not clean up: " + "; ".join(errors))
            return 1
    foreign = [n for n in net.netns_names(topo) if n in net.existing_netns()]
    if foreign:
        _say(f"network namespaces {', '.join(foreign)} exist but no state records them")
        return 1
    st = State(topology=topo, pivot_existed=bool(_pivots()), power_save=power_save)
    st.save()
    try:
        passwords = _build(st, with_stack)
    except (CommandError, OSError, subprocess.TimeoutExpired) as exc:
        _say(f"up failed: {exc}")
        _say(f"logs are in {paths.LOG}; removing what was built")
        keep = FAILED_LOGS
        shutil.rmtree(keep, ignore_errors=True)
        if paths.LOG.is_dir():
            shutil.copytree(paths.LOG, keep)
        errors = teardown(st)
        if errors:
            _say("cleanup left: " + "; ".join(errors))
        else:
            _say(f"cleaned up; logs kept in {keep}")
        return 1
    _say(f"up in {st.up_seconds:.1f}s")
    if passwords:
        print(stack.passwords_text(passwords, topo))
    _print_table(st)
    return 0


# ---------------------------------------------------------------- down, status


def cmd_down(_args: argparse.Namespace) -> int:
    try:
        st = load()
    except StateError as exc:
        _say(str(exc))
        return 1
    if st is None:
        _say("nothing to do (no state file)")
        return 0
    errors = teardown(st)
    if errors:
        _say("down left behind: " + "; ".join(errors))
        return 1
    _say("down")
    return 0


def _watts(host_name: str) -> str:
    try:
        return (paths.BMC / host_name / "watts").read_text().strip()
    except OSError:
        return "-"


def _bmc(h: Host) -> dict[str, Any]:
    return {
        "address": h.bmc_ip,
        "port": h.bmc_port,
        # reachable from the host's netns (and the head's) over the
        # management network; not from the root namespace
        "netns": h.netns,
        "user": bmc.BMC_USER,
        "password_file": str(paths.BMC / h.name / "password"),
        "watts_file": str(paths.BMC / h.name / "watts"),
    }


def status_dict(st: State) -> dict[str, Any]:
    topo = st.topology
    states = slurm.node_states(topo)
    cpusets = topo.cpusets(containers.machine_cpus())
    where = placement.read()
    hosts = []
    for h in topo.hosts():
        hosts.append(
            {
                "name": h.name,
                "rack": h.rack,
                "netns": h.netns,
                "ip": h.ip,
                "mgmt_ip": h.mgmt_ip,
                "bmc": _bmc(h),
                "containers": [
                    {
                        "name": c.name,
                        "ip": c.ip,
                        "veth": c.veth,
                        "cpus": topo.cpus_per_container,
                        "cpuset": list(cpusets[c.name]),
                        "memory_mb": topo.memory_mb_per_container,
                        "lxc": containers.state(c.name),
                        "slurm": states.get(c.name, "?"),
                        # the host it runs on now (a migration moves it from its home)
                        "on": where.get(c.name, c.host),
                    }
                    for c in h.containers
                ],
            }
        )
    return {
        "up": not problems(st),
        "problems": problems(st),
        "up_seconds": st.up_seconds,
        "topology": topo.to_dict(),
        "head": {"netns": topo.core_netns, "ip": topo.head_ip, "mgmt_ip": topo.head_mgmt_ip},
        "mgmt": {"netns": topo.mgmt_netns, "subnet": topo.mgmt_subnet},
        "racks": [
            {"index": r.index, "netns": r.netns, "subnet": r.subnet, "core_if": r.core_if}
            for r in topo.racks()
        ],
        "hosts": hosts,
        "criu": st.criu,
        "criu_config": str(paths.CRIU_CONF),
        "lxcpath": str(paths.LXC),
        "slurm_conf": str(paths.SLURM_CONF),
        "select": _select_dict(),
        "shared_dir": str(paths.SHARED),
        "slurm_user": slurm.SLURM_USER,
        "accounting": {
            "slurmdbd": f"{topo.head_ip}:{accounting.DBD_PORT}",
            "cluster": slurm.CLUSTER_NAME,
            "mariadb_socket": str(accounting.SOCKET),
            "database": accounting.DB,
        },
        "exec_dir": str(paths.SHARED),
        "cluster_file": str(paths.CLUSTER),
        "cluster": cluster.document(topo, cluster.powered_off(topo)),
        "emulated_misses": {"dir": str(misses.DIR), "profiles": str(misses.PROFILES)},
        "env_file": str(paths.ENV_FILE),
        "processes": [p.to_dict() for p in st.processes],
        "netns": st.netns,
        "stack": stack.status(st),
    }


def _select_dict() -> dict[str, Any]:
    select = slurm.select_type()
    clavis = select == slurm.CLAVIS
    return {
        "type": select,
        "plugin": str(paths.PLUGINS / slurm.SELECT_SO.name) if clavis else None,
        "config": str(paths.SELECT_CONF) if clavis else None,
        "advice_file": str(paths.ADVICE) if clavis else None,
    }


def _print_table(st: State) -> None:
    d = status_dict(st)
    topo = st.topology
    print(
        f"head: netns {topo.core_netns} ip {topo.head_ip}   core link: tbf "
        f"{topo.core_rate_mbit} Mbit/s   select: {d['select']['type']}   criu: {d['criu']}"
    )
    hdr = ("RACK", "HOST", "NETNS", "BMC", "WATTS", "CONTAINER", "IP", "LXC", "SLURM")
    rows = []
    for h in d["hosts"]:
        for c in h["containers"]:
            rows.append(
                (
                    f"r{h['rack']}", h["name"], h["netns"],
                    f"{h['bmc']['address']}:{h['bmc']['port']}",
                    _watts(h["name"]), c["name"], c["ip"],
                    c["lxc"] + ("" if c["on"] == h["name"] else f" on {c['on']}"), c["slurm"],
                )
            )  # fmt: skip
    widths = [max(len(str(x)) for x in col) for col in zip(hdr, *rows, strict=False)]
    for row in (hdr, *rows):
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip())
    for line in stack.table_lines(d["stack"]):
        print(line)
    if d["problems"]:
        print("problems: " + "; ".join(d["problems"]))


def cmd_status(args: argparse.Namespace) -> int:
    try:
        st = load()
    except StateError as exc:
        _say(str(exc))
        return 1
    if st is None:
        if args.json:
            print(json.dumps({"up": False, "problems": ["no state file"]}))
        else:
            print("down")
        return EXIT_NOT_UP
    if args.json:
        print(json.dumps(status_dict(st), indent=1))
    else:
        _print_table(st)
    return 0 if not problems(st) else 1


# ---------------------------------------------------------------- helpers for users


def _require_up(wait_s: float = 0.0) -> State:
    """The state of a testbed that is up; one still being built is waited for, at most
    ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    st = load()
    while st is not None and st.phase == "building" and time.monotonic() < deadline:
        time.sleep(0.5)
        st = load()
    if st is None or st.phase != "up":
        raise CommandError("the testbed is not up (run `clavis-testbed up`)")
    return st


def cmd_exec(args: argparse.Namespace) -> int:
    """Run a command where slurmctld lives, with SLURM_CONF set (e.g. sinfo, sbatch)."""
    st = _require_up()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        _say("exec needs a command, e.g. `clavis-testbed exec -- sinfo`")
        return EXIT_BAD_INPUT
    cp = subprocess.run(
        in_netns(st.topology.core_netns, argv),
        env=slurm.client_env(),
        cwd=exec_dir(),
        check=False,
    )
    return cp.returncode


def exec_dir() -> Path:
    """Where `exec` runs its command: the caller's directory when it is inside the
    shared directory (which the head and every node see at the same path), else the
    shared directory itself, so `exec -- sbatch job.sh` finds job.sh there and the
    job's output (slurm-ID.out, relative -o paths) lands there on whichever node."""
    try:
        cwd = Path.cwd().resolve()
    except OSError:  # the caller's directory was removed
        return paths.SHARED
    shared = paths.SHARED.resolve()
    return cwd if cwd == shared or shared in cwd.parents else shared


def _container(st: State, name: str) -> Any:
    for c in st.topology.containers():
        if c.name == name:
            return c
    raise CommandError(f"no container named {name!r}")


def cmd_checkpoint(args: argparse.Namespace) -> int:
    st = _require_up()
    c = _container(st, args.name)
    d = Path(args.dir) if args.dir else paths.CKPT / c.name
    t0 = time.monotonic()
    containers.checkpoint(c, d)
    _say(f"checkpointed {c.name} to {d} in {time.monotonic() - t0:.2f}s")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    st = _require_up()
    c = _container(st, args.name)
    d = Path(args.dir) if args.dir else paths.CKPT / c.name
    t0 = time.monotonic()
    containers.restore(c, d)
    containers.set_cpuset(c, st.topology.cpusets(containers.machine_cpus())[c.name])
    _say(f"restored {c.name} from {d} in {time.monotonic() - t0:.2f}s")
    return 0


def cmd_missd(_args: argparse.Namespace) -> int:
    st = load()
    if st is None:
        _say("missd: no state file")
        return 1
    misses.serve(st.topology)
    return 0


def cmd_node_moved(args: argparse.Namespace) -> int:
    """The migrators' network hook (agents.py): `node-moved restored NODE HOST`."""
    st = _require_up()
    try:
        _say(placement.hook(st.topology, args.what, args.node, args.host))
    except placement.PlacementError as exc:
        _say(f"node-moved: {exc}")
        return 1
    return 0


NODE_POWER_WAIT_S = 45.0  # within clavisd's command_timeout_s of 60 s (powersave.py)


def cmd_node_power(args: argparse.Namespace) -> int:
    """Slurm's power saving on the testbed, as clavisd's node command runs it
    (chassis.py): `node-power stop NODE`, `node-power start NODE HOST`."""
    # slurmctld suspends nodes idle for SuspendTime (10 s), which can come before `up`
    # has started the rest of the stack: wait for it rather than fail the suspend (Slurm
    # would count the node powered down with its container running)
    st = _require_up(wait_s=NODE_POWER_WAIT_S)
    _container(st, args.node)
    if args.action == "stop":
        errors = chassis.suspend_node(args.node)
        _say(f"{args.node} suspended" + (": " + "; ".join(errors) if errors else ""))
        return 1 if errors else 0
    if args.host is None:
        _say("node-power start needs NODE HOST")
        return EXIT_BAD_INPUT
    try:
        chassis.start_node(st.topology, args.node, args.host)
    except placement.PlacementError as exc:
        _say(f"node-power: {exc}")
        return 1
    _say(f"{args.node} started on {args.host}")
    return 0


def cmd_agents(args: argparse.Namespace) -> int:
    """Stop or start the stack's migrator agents (an admin's view of agents down)."""
    st = _require_up()
    if args.action == "stop":
        errors = agents.stop_all(st)
        _say("; ".join(errors) if errors else "migrator agents stopped")
        return 1 if errors else 0
    stack.start_agents(st)
    _say("migrator agents started: " + ", ".join(agents.address(h) for h in st.topology.hosts()))
    return 0


def cmd_clavisd(_args: argparse.Namespace) -> int:
    """Start the stack's clavisd again after it died, on the same store."""
    st = _require_up()
    c = stack.restart_clavisd(st)
    _say(f"clavisd started again (pid {c.pid}) on {stack.STORE}")
    return 0


def cmd_powerd(_args: argparse.Namespace) -> int:
    st = load()
    if st is None:
        _say("powerd: no state file")
        return 1
    power.serve(st.topology)
    return 0


# ---------------------------------------------------------------- argument parsing


def _topology_from_args(args: argparse.Namespace) -> Topology:
    overrides = {
        "racks": args.racks,
        "hosts_per_rack": args.hosts_per_rack,
        "containers_per_host": args.containers_per_host,
        "cpus_per_container": args.cpus_per_container,
        "spare_cpus_per_host": args.spare_cpus_per_host,
        "memory_mb_per_container": args.memory_mb_per_container,
        "core_rate_mbit": args.core_rate_mbit,
        "bmc_base_port": args.bmc_base_port,
    }
    return load_topology(Path(args.topology) if args.topology else None, overrides)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clavis-testbed", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="build the emulated cluster (idempotent)")
    up.add_argument("--topology", help="TOML file with racks, hosts_per_rack, ...")
    up.add_argument("--racks", type=int)
    up.add_argument("--hosts-per-rack", type=int)
    up.add_argument("--containers-per-host", type=int)
    up.add_argument("--cpus-per-container", type=int)
    up.add_argument(
        "--spare-cpus-per-host", type=int, help="host cores no node uses (room to move)"
    )
    up.add_argument("--memory-mb-per-container", type=int, help="RealMemory and memory limit")
    up.add_argument("--core-rate-mbit", type=int, help="tbf rate of the inter-rack link")
    up.add_argument("--bmc-base-port", type=int, help="UDP port of the first BMC")
    up.add_argument(
        "--stack",
        action="store_true",
        help="also run the Clavis stack: clavisd, a monitor per host, the Slurm plugins",
    )
    up.add_argument(
        "--power-save",
        action="store_true",
        help="with the stack: Slurm's power saving and clavisd's host power (issue 17)",
    )
    up.set_defaults(func=cmd_up)
    sub.add_parser("down", help="remove everything up created").set_defaults(func=cmd_down)
    st = sub.add_parser("status", help="table (or --json) of the running testbed")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)
    ex = sub.add_parser("exec", help="run a command in the head netns with SLURM_CONF")
    ex.add_argument("argv", nargs=argparse.REMAINDER)
    ex.set_defaults(func=cmd_exec)
    for name, func in (("checkpoint", cmd_checkpoint), ("restore", cmd_restore)):
        c = sub.add_parser(name, help=f"{name} a container with CRIU {paths.CRIU_VERSION}")
        c.add_argument("name")
        c.add_argument("--dir", help="image directory (default under /run/clavis-testbed)")
        c.set_defaults(func=func)
    sub.add_parser("powerd", help=argparse.SUPPRESS).set_defaults(func=cmd_powerd)
    ag = sub.add_parser("agents", help="stop or start the stack's clavis-migrator agents")
    ag.add_argument("action", choices=("stop", "start"))
    ag.set_defaults(func=cmd_agents)
    cd = sub.add_parser("clavisd", help="start the stack's clavisd again after it died")
    cd.add_argument("action", choices=("start",))
    cd.set_defaults(func=cmd_clavisd)
    nm = sub.add_parser("node-moved", help="the migrators' network hook: restored NODE HOST")
    for a in ("what", "node", "host"):
        nm.add_argument(a)
    nm.set_defaults(func=cmd_node_moved)
    sub.add_parser("missd", help=argparse.SUPPRESS).set_defaults(func=cmd_missd)
    npw = sub.add_parser("node-power", help="Slurm power saving: stop NODE | start NODE HOST")
    npw.add_argument("action", choices=("stop", "start"))
    npw.add_argument("node")
    npw.add_argument("host", nargs="?")
    npw.set_defaults(func=cmd_node_power)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if os.geteuid() != 0:
        _say("must run as root (namespaces, LXC, iptables)")
        return 1
    try:
        rc: int = args.func(args)
        return rc
    except TopologyError as exc:
        _say(f"bad topology: {exc}")
        return EXIT_BAD_INPUT
    except (CommandError, StateError) as exc:
        _say(str(exc))
        return 1
