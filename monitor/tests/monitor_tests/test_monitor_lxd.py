"""LXD/Incus discovery through the REST API: a real HTTP server on a UNIX socket in the
test serves answers recorded from a real LXD 5.0.2 on this machine (``lxd/``, see its
README), and the monitor's real client, cgroup mapping and discovery read them, with a
real process in real cgroups as the instance's init. Faults: absent socket, no answer,
error answers, garbage, an instance that stops between two requests."""

from __future__ import annotations

import json
import os
import socketserver
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from clavis_monitor import lxd, series
from clavis_monitor.agent import Agent
from clavis_monitor.config import parse

from .cgroups import CgroupSet

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (cgroups)")

ANSWERS = Path(__file__).parent / "lxd"
Route = Callable[[str], tuple[int, bytes]]


class _Handler(BaseHTTPRequestHandler):
    server: FakeLxd

    def do_GET(self) -> None:
        self.server.seen.append(self.path)
        time.sleep(self.server.delay_s)
        status, body = self.server.route(self.path)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class FakeLxd(socketserver.ThreadingUnixStreamServer):
    """An HTTP server on a UNIX socket answering with ``route(path)``."""

    daemon_threads = True

    def __init__(self, path: Path, route: Route) -> None:
        super().__init__(str(path), _Handler)
        self.route, self.seen, self.delay_s = route, list[str](), 0.0
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join(timeout=5)
        Path(self.server_address).unlink(missing_ok=True)  # type: ignore[arg-type]


def _listing_with_a_vm() -> bytes:
    """The recorded listing plus a running virtual machine (none can run here): a copy
    of n1 with LXD's type and name changed."""
    doc = json.loads((ANSWERS / "instances.json").read_text())
    vm = {**doc["metadata"][0], "name": "vm1", "type": "virtual-machine"}
    doc["metadata"].append(vm)
    return json.dumps(doc).encode()


def _error(code: int, message: str) -> bytes:
    """LXD's error answer (the recorded 404's shape) with another code and message."""
    doc = json.loads((ANSWERS / "error-404.json").read_text())
    return json.dumps({**doc, "error_code": code, "error": message}).encode()


def lxd_answers(init_pid: int) -> Route:
    """The recorded answers, with the state's init PID replaced by a live process."""
    listing = _listing_with_a_vm()
    state = json.loads((ANSWERS / "state-n1.json").read_text())
    state["metadata"]["pid"] = init_pid
    stopped = (ANSWERS / "state-n2.json").read_bytes()
    not_found = (ANSWERS / "error-404.json").read_bytes()

    def route(path: str) -> tuple[int, bytes]:
        if path == "/1.0/instances?recursion=1":
            return 200, listing
        if path == "/1.0/instances/n1/state":
            return 200, json.dumps(state).encode()
        if path == "/1.0/instances/n2/state":
            return 200, stopped
        return 404, not_found

    return route


@pytest.fixture
def cs() -> Iterator[CgroupSet]:
    s = CgroupSet(["n1"]).create()
    try:
        yield s
    finally:
        s.remove()


@pytest.fixture
def init(cs: CgroupSet) -> Iterator[int]:
    """A process in the cgroups of n1, in v2 in n1/init.scope (as systemd puts itself)."""
    p = subprocess.Popen(["sleep", "300"])
    cs.enter(p.pid, "n1")
    scope = cs.path("unified", "n1") / "init.scope"
    if scope.parent.is_dir():
        scope.mkdir()
        (scope / "cgroup.procs").write_text(f"{p.pid}\n")
    try:
        yield p.pid
    finally:
        p.kill()
        p.wait(timeout=10)
        if scope.is_dir():
            scope.rmdir()


def _agent(
    tmp_path: Path, cs: CgroupSet, sockets: list[str], timeout_s: float = 1.0, scan: bool = True
) -> Agent:
    cfg = parse({
        "host": "h1",
        "containers": {"scan_prefixes": [cs.prefix] if scan else [], "lxc_paths": [],
                       "lxd_sockets": sockets, "lxd_timeout_s": timeout_s},
        "perf": {"enabled": False},
        "traffic": {"backend": "none"},
        "power": {"methods": ["rapl"], "rapl_root": str(tmp_path / "no-rapl")},
    })  # fmt: skip
    return Agent(cfg, None)


def _states(agent: Agent) -> dict[str, str]:
    metric = next(m for m in series.of(agent) if m.name == "clavis_monitor_sampler_state")
    return {
        labels["sampler"]: labels["state"]
        for labels, _ in metric.samples
        if labels["sampler"].startswith("lxd:")
    }


def test_running_containers_with_the_cgroups_of_their_init(
    tmp_path: Path, cs: CgroupSet, init: int
) -> None:
    sock = tmp_path / "lxd" / "unix.socket"
    sock.parent.mkdir()
    server = FakeLxd(sock, lxd_answers(init))
    absent = str(tmp_path / "incus" / "unix.socket")
    try:
        agent = _agent(tmp_path, cs, [absent, str(sock)])
        agent.sample_cpu()
        # the stopped container and the virtual machine are not asked for their state
        assert server.seen == ["/1.0/instances?recursion=1", "/1.0/instances/n1/state"]
        assert [c.name for c in agent.containers] == ["n1"]  # the scan's n1 is the same
        n1 = agent.containers[0]
        assert n1.source == "lxd" and n1.addresses == ("10.5.0.11",)
        want = {h: cs.path(h, "n1") for h in ("cpuacct", "memory", "unified")
                if cs.path(h, "n1").is_dir()}  # fmt: skip
        assert n1.cgroups == want  # v2: the container's cgroup, not its init.scope
        assert agent.lxd_states == {str(sock): "ok"}  # an absent socket is no error
        assert _states(agent) == {f"lxd:{sock}": "ok"}
        time.sleep(0.1)
        agent.sample_cpu()
        report = agent.build_report()
        assert [s.name for s in report.containers] == ["n1"]
    finally:
        server.stop()


def test_incus_socket_and_the_api_alone(tmp_path: Path, cs: CgroupSet, init: int) -> None:
    sock = tmp_path / "incus" / "unix.socket"
    sock.parent.mkdir()
    server = FakeLxd(sock, lxd_answers(init))
    try:
        agent = _agent(tmp_path, cs, [str(sock)], scan=False)
        agent.sample_cpu()
        assert [(c.name, c.source) for c in agent.containers] == [("n1", "incus")]
    finally:
        server.stop()


def test_an_instance_stopped_between_the_requests_is_left_to_the_scan(
    tmp_path: Path, cs: CgroupSet, init: int
) -> None:
    listing = (ANSWERS / "instances.json").read_bytes()  # n1 running when listed...
    stopped = (ANSWERS / "state-n2.json").read_bytes()  # ...stopped when asked: pid 0
    sock = tmp_path / "lxd.socket"
    server = FakeLxd(sock, lambda p: (200, listing if "recursion" in p else stopped))
    try:
        agent = _agent(tmp_path, cs, [str(sock)])
        agent.sample_cpu()
        assert agent.lxd_states == {str(sock): "ok"}
        assert [(c.name, c.source) for c in agent.containers] == [("n1", "cgroup")]
    finally:
        server.stop()


@pytest.mark.parametrize(
    "case",
    [
        (None, 2.0, "GET /1.0/instances?recursion=1: no answer within 0.3 s"),
        (lambda p: (500, _error(500, "Failed to fetch instances: database is locked")), 0.0,
         "GET /1.0/instances?recursion=1: HTTP 500: Failed to fetch instances: database is "
         "locked"),
        (lambda p: (200, b"<html>not LXD</html>"), 0.0,
         "GET /1.0/instances?recursion=1: HTTP 200, not JSON"),
        (lambda p: (200, b'{"type": "sync", "metadata": {"n1": 1}}'), 0.0,
         "GET /1.0/instances?recursion=1: metadata is not a list"),
        (lambda p: (200, (ANSWERS / "instances.json").read_bytes()) if "recursion" in p
         else (404, (ANSWERS / "error-404.json").read_bytes()), 0.0,
         "GET /1.0/instances/n1/state: HTTP 404: Instance not found"),
    ],
)  # fmt: skip
def test_a_broken_api_is_a_state_and_the_scan_still_finds_the_container(
    tmp_path: Path, cs: CgroupSet, init: int, case: tuple[Route | None, float, str]
) -> None:
    route, delay_s, why = case
    sock = tmp_path / "lxd.socket"
    server = FakeLxd(sock, route or lxd_answers(init))
    server.delay_s = delay_s
    try:
        agent = _agent(tmp_path, cs, [str(sock)], timeout_s=0.3)
        t0 = time.monotonic()
        agent.sample_cpu()
        assert time.monotonic() - t0 < 1.5  # bounded by the timeout, not the server
        assert agent.lxd_states == {str(sock): f"unavailable: {why}"}
        assert [(c.name, c.source) for c in agent.containers] == [("n1", "cgroup")]
    finally:
        server.stop()


def test_container_path_and_engine() -> None:
    assert lxd.container_path("/lxc.payload.n1/init.scope") == "/lxc.payload.n1"
    assert lxd.container_path("/lxc.payload.p_n1/system.slice/x") == "/lxc.payload.p_n1"
    assert lxd.container_path("/lxc/n1/init.scope") == "/lxc/n1"
    assert lxd.container_path("/") == "/"
    assert lxd.engine_of("/var/lib/incus/unix.socket") == "incus"
    assert lxd.engine_of("/var/snap/lxd/common/lxd/unix.socket") == "lxd"
