"""The agent: samplers on their own timers feeding the batched pipeline, and the reporter.

Threads: one per sampler (cgroups every interval, perf every interval, traffic every
``traffic.every_s``, power every ``power.every_s``), the idle-priority flush worker, the
reporter (one report per interval), the sender's spool drain, the registration socket
and /metrics. Every sampler catches its own failure class and records a state, so one
broken source never stops the others.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clavis_contracts.report import (
    ContainerSample,
    IntensitySource,
    MonitorReport,
    PeerTraffic,
    PowerReading,
)
from clavis_monitor import containers as cg
from clavis_monitor import series
from clavis_monitor.config import Config
from clavis_monitor.emulated import EmulatedCounters
from clavis_monitor.metrics import Metric
from clavis_monitor.perf import (
    CounterSource,
    Counts,
    PerfCounters,
    UnsupportedError,
    cpu_of,
    event_table,
    mpki,
    perf_cgroup_root,
)
from clavis_monitor.pipeline import Buffer, IdleWorker, LoadGauge, State
from clavis_monitor.power import PowerReader
from clavis_monitor.registry import Registry
from clavis_monitor.sender import Sender
from clavis_monitor.traffic import (
    NftAccounting,
    PeerRate,
    Topology,
    TrafficError,
    addresses_for,
    parse_topology,
    rates,
)

log = logging.getLogger("clavis_monitor.agent")


@dataclass(frozen=True)
class CpuValue:
    busy_cores: float
    cores: int
    memory_bytes: int


@dataclass(frozen=True)
class Intensity:
    mpki: float | None
    source: IntensitySource
    reason: str = ""


class Agent:
    def __init__(
        self,
        cfg: Config,
        sender: Sender | None,
        counters: CounterSource | None = None,
        recorded: bool = False,
    ) -> None:
        self.cfg = cfg
        self.sender = sender
        self.registry = Registry()
        self.gauge = LoadGauge()
        self.worker = IdleWorker()
        self.state = State()
        self.host_cores = os.cpu_count() or 1
        self.host_memory = cg.host_memory_bytes()
        self.containers: list[cg.Container] = []
        self.lxd_states: dict[str, str] = {}  # LXD/Incus socket -> ok or why not
        self.vanished = 0
        self.reports = 0
        self._next_scan = 0.0
        # Read at each rescan, not every interval: (cores, memory limit) and the Slurm
        # jobs found in the container's cgroups (the fallback when nothing registered).
        self._limits: dict[str, tuple[int, int]] = {}
        self._cgroup_jobs: dict[str, list[int]] = {}
        self._last_cpu: dict[str, tuple[int, float]] = {}
        self._cpu_times = cg.CpuTimes()
        self.unsupported: dict[str, str] = {}  # container -> why it has no intensity
        self._last_counts: dict[str, Counts] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.buffers = {
            name: Buffer(name, self.state.apply, capacity, gauge=self.gauge, worker=self.worker)
            for name, capacity in (("cpu", 256), ("perf", 256), ("traffic", 256), ("power", 4))
        }
        # perf: a recorded source for tests/hosts without PMU, else the real reader, else
        # (only when configured, on a testbed) the emulated counters
        self.perf_state = "disabled"
        self.counters: CounterSource | None = counters
        self.source: IntensitySource = "recorded" if recorded else "perf"
        self._next_probe = 0.0
        if counters is None and cfg.perf.enabled:
            self._probe_perf()
        elif counters is not None:
            self.perf_state = "recorded" if recorded else "ok"
        if counters is None and cfg.emulation.miss_counters_dir:
            self._use_emulation(Path(cfg.emulation.miss_counters_dir))
        # traffic
        self.nft: NftAccounting | None = None
        self.traffic_state = "disabled"
        self.topology: Topology | None = None
        self._topo_mtime = -1.0
        self._traffic_last: tuple[dict[tuple[str, str], int], float] | None = None
        if cfg.traffic.backend == "nftables":
            self.nft = NftAccounting(cfg.traffic.nft, cfg.traffic.table)
        self.power = PowerReader(cfg.power)

    def _probe_perf(self) -> None:
        """Open the real counters, or record why not (tried again every probe_s)."""
        self._next_probe = time.monotonic() + self.cfg.perf.probe_s
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
        root = perf_cgroup_root(Path(self.cfg.containers.cgroup_root))
        reader = PerfCounters(event_table(cpu_of(cpuinfo), self.cfg.perf.raw_events), root)
        try:
            reader.probe()
            self.counters, self.perf_state = reader, "ok"
        except (UnsupportedError, OSError) as exc:
            self.perf_state = f"unsupported: {exc}"

    def _use_emulation(self, directory: Path) -> None:
        """The configured emulated counters, unless this host has real ones."""
        if self.counters is not None:
            log.warning("emulation.miss_counters_dir=%s ignored: this host has hardware "
                        "counters (perf)", directory)  # fmt: skip
            return
        emulated = EmulatedCounters(directory)
        try:
            emulated.probe()
        except UnsupportedError as exc:
            log.warning("emulated miss counters: %s", exc)  # each read says so again
        self.counters, self.source = emulated, "emulated"
        self.perf_state = f"emulated: {directory}"
        log.info("intensity source=emulated dir=%s (testbed emulation, not hardware)", directory)

    # -- samplers (each runs in its own thread) -------------------------------------------

    def _rescan(self, now: float) -> None:
        """Discover the containers and read what changes rarely: their limits and the
        Slurm jobs in their cgroups (every ``containers.rescan_s``)."""
        states = dict(self.lxd_states)  # a new dict: /metrics reads the old one meanwhile
        self.containers = cg.discover(self.cfg.containers, states)
        for sock, state in states.items():
            if state != self.lxd_states.get(sock):
                log.log(logging.INFO if state == "ok" else logging.WARNING,
                        "lxd socket=%s state=%s", sock, state)  # fmt: skip
        self.lxd_states = states
        self._next_scan = now + self.cfg.containers.rescan_s
        for c in list(self.containers):
            try:
                self._limits[c.name] = (
                    cg.cores(c, self.host_cores),
                    cg.memory_limit(c, self.host_memory),
                )
            except cg.VanishedError:
                self._vanish(c.name)
                continue
            self._cgroup_jobs[c.name] = cg.jobs_in(c)
        alive = {c.name for c in self.containers}
        self.registry.prune(alive)
        for name in [n for n in {*self._last_cpu, *self._limits} if n not in alive]:
            self._forget(name)

    def _vanish(self, name: str) -> None:
        self.vanished += 1
        self.containers = [x for x in self.containers if x.name != name]
        self._forget(name)

    def sample_cpu(self) -> None:
        now = time.monotonic()
        if now >= self._next_scan:
            self._rescan(now)
        buf = self.buffers["cpu"]
        busy = self.gauge.update(cg.host_cpu_ticks())
        for c in list(self.containers):
            try:
                ns = self._cpu_times.read(c)
            except cg.VanishedError:
                self._vanish(c.name)
                continue
            cores, memory = self._limits[c.name]
            last = self._last_cpu.get(c.name)
            self._last_cpu[c.name] = (ns, now)
            if last is not None and now > last[1]:
                used = max(0.0, (ns - last[0]) / 1e9 / (now - last[1]))
                buf.add(c.name, CpuValue(used, cores, memory))
        buf.add("host", busy)
        buf.flush()

    def _forget(self, name: str) -> None:
        self._cpu_times.forget(name)
        self._limits.pop(name, None)
        self._cgroup_jobs.pop(name, None)
        self._last_cpu.pop(name, None)
        self._last_counts.pop(name, None)
        if self.counters is not None:
            self.counters.forget(name)
        self.state.drop(name)

    def sample_perf(self) -> None:
        buf = self.buffers["perf"]
        if self.counters is None and self.cfg.perf.enabled and time.monotonic() >= self._next_probe:
            self._probe_perf()
        if self.counters is None:
            return  # the host has no counters: build_report gives every container the reason
        for c in list(self.containers):
            try:
                counts = self.counters.read(
                    c.name, c.cgroups.get("perf_event") or c.cgroups.get("unified")
                )
            except (UnsupportedError, OSError) as exc:
                buf.add(c.name, Intensity(None, "unsupported", str(exc)))
                continue
            last = self._last_counts.get(c.name)
            self._last_counts[c.name] = counts
            if last is None:
                continue
            try:
                value = mpki(last, counts)
            except ValueError:
                continue
            buf.add(c.name, Intensity(value, self.source))
        buf.flush()

    def _load_topology(self) -> Topology | None:
        path = Path(self.cfg.traffic.topology_file)
        try:
            mtime = path.stat().st_mtime
        except OSError:
            raise TrafficError(f"topology file {path} is missing") from None
        if mtime != self._topo_mtime:
            self.topology = parse_topology(path.read_text(encoding="utf-8"))
            self._topo_mtime = mtime
        return self.topology

    def sample_traffic(self) -> None:
        if self.nft is None:
            return
        buf = self.buffers["traffic"]
        try:
            topo = self._load_topology()
            assert topo is not None
            local = {c.name: c.addresses or topo.addresses.get(c.name, ()) for c in self.containers}
            mine, peers = addresses_for(local, topo)
            if not self.nft.ready:
                self.nft.install(mine, peers)
            else:
                self.nft.update(mine, peers)
            now = time.monotonic()
            counts = self.nft.read()
        except (TrafficError, ValueError) as exc:
            self.traffic_state = f"unavailable: {exc}"
            self._traffic_last = None
            self.nft.ready = False
            return
        self.traffic_state = "ok"
        if self._traffic_last is not None:
            before, t0 = self._traffic_last
            per = rates(before, counts, now - t0, local=local, topo=topo, host=self.cfg.host)
            for name in local:
                buf.add(name, tuple(per.get(name, ())))
            buf.flush()
        self._traffic_last = (counts, now)

    def sample_power(self) -> None:
        self.buffers["power"].add("host", self.power.read())
        self.buffers["power"].flush()

    # -- report ---------------------------------------------------------------------------

    def build_report(self) -> MonitorReport:
        cpu = self.state.of("cpu")
        perf = self.state.of("perf")
        traffic = self.state.of("traffic")
        power = self.state.get("power", "host")
        jobs = self.registry.node_jobs()
        samples = []
        unsupported: dict[str, str] = {}
        for c in self.containers:
            cv = cpu.get(c.name)
            if cv is None:
                continue
            value: CpuValue = cv.value
            inten = perf.get(c.name)
            if inten is not None:
                iv: Intensity = inten.value
            else:
                why = self.perf_state if self.counters is None else "no counter reading yet"
                iv = Intensity(None, "unsupported", why)
            if iv.mpki is None:
                unsupported[c.name] = iv.reason
            tv = traffic.get(c.name)
            peers: tuple[PeerRate, ...] = tv.value if tv is not None else ()
            job = jobs.get(c.name)
            fallback = None if job is not None else self._cgroup_jobs.get(c.name)
            samples.append(
                ContainerSample(
                    name=c.name,
                    job=job.job if job else (str(fallback[-1]) if fallback else None),
                    app=job.app if job else None,
                    class_hint=job.class_hint if job and job.class_hint != "auto" else None,
                    cores=value.cores,
                    memory_bytes=value.memory_bytes,
                    busy_cores=min(value.busy_cores, float(value.cores)),
                    intensity_mpki=iv.mpki,
                    intensity_source=iv.source,
                    traffic=[PeerTraffic(peer=p.peer, bytes_per_s=p.bytes_per_s) for p in peers],
                )
            )
        host = self.state.get("cpu", "host")
        self.unsupported = unsupported  # the report carries no reason: /metrics shows it
        return MonitorReport(
            host=self.cfg.host,
            timestamp=dt.datetime.now(dt.UTC),
            interval_s=self.cfg.interval_s,
            busy_cores=float(host.value) if host is not None else 0.0,
            power=power.value if power is not None else PowerReading(watts=None, source="none"),
            memory_bytes=self.host_memory,  # each container's memory is capped at it
            containers=samples,
        )

    def report_once(self) -> MonitorReport:
        report = self.build_report()
        self.last_report = report
        self.reports += 1
        if self.sender is not None:
            self.sender.submit(report.model_dump_json().encode())
        return report

    # -- threads --------------------------------------------------------------------------

    def _loop(self, name: str, fn: Callable[[], None], period: float) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                fn()
            except Exception:
                log.exception("sampler=%s failed; it keeps running", name)
            self._stop.wait(max(0.0, period - (time.monotonic() - t0)))

    def start(self) -> Agent:
        self.worker.start()
        if self.sender is not None:
            self.sender.start()
        self.sample_cpu()  # containers known before the other samplers start
        i = self.cfg.interval_s
        for name, fn, period in (
            ("cpu", self.sample_cpu, i),
            ("perf", self.sample_perf, i),
            ("traffic", self.sample_traffic, self.cfg.traffic.every_s),
            ("power", self.sample_power, self.cfg.power.every_s),
            ("report", self.report_once, i),
        ):
            t = threading.Thread(target=self._loop, args=(name, fn, period), name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        """Stop the threads and remove the accounting tables (nothing of ours stays)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self.cfg.power.timeout_s + 5)
        self.worker.stop()
        self.power.close()
        self._cpu_times.close()
        if self.sender is not None:
            self.sender.stop()
        if self.nft is not None:
            try:
                self.nft.remove()
            except TrafficError as exc:
                log.warning("could not remove the accounting tables: %s", exc)

    # -- /metrics -------------------------------------------------------------------------

    def metrics(self) -> list[Metric]:
        """The /metrics series of the last snapshot (clavis_monitor.series)."""
        return series.of(self)
