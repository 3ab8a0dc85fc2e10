"""Host power: DCMI power reading, else an SDR Watts sensor, else RAPL powercap.

Manual equivalents: ``ipmitool [-I lanplus -H BMC -p PORT -U USER -f PWFILE -C 3] dcmi
power reading``, ``ipmitool sdr type "Other Units-based Sensor"`` / ``sdr list full``,
``cat /sys/class/powercap/intel-rapl:*/energy_uj``. Every method has a timeout and
leaves a one-line state (``ok`` or why not) for /metrics; when none works the reading is
``{"watts": null, "source": "none"}``.

ipmitool runs as one long-lived ``ipmitool [LAN options] shell`` (:class:`IpmiShell`)
that keeps its session between readings: a fresh ipmitool costs about 30 ms of CPU per
call (RMCP+ session set-up and parsing the IANA enterprise-number registry at start),
three times the agent's whole per-interval budget when power is read every 10 s.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from clavis_contracts.report import PowerReading, PowerSource
from clavis_monitor.config import PowerConfig

_DCMI = re.compile(r"Instantaneous power reading:\s*([0-9.]+)\s*Watts", re.IGNORECASE)
_SDR_WATTS = re.compile(r"^([^|]+?)\s*\|\s*([0-9.]+)\s*Watts\s*\|", re.MULTILINE)


class PowerError(Exception):
    """One method gave no reading; the message says why."""


def parse_dcmi(text: str) -> float:
    m = _DCMI.search(text)
    if m is None:
        raise PowerError("no 'Instantaneous power reading' in ipmitool dcmi output")
    return float(m.group(1))


def parse_sdr_watts(text: str, sensor: str) -> float:
    """Watts of the named sensor (or the first in Watts) from ``ipmitool sdr list``."""
    for name, value in _SDR_WATTS.findall(text):
        if not sensor or name.strip() == sensor:
            return float(value)
    raise PowerError(f"no {'sensor ' + repr(sensor) if sensor else 'sensor'} in Watts in the SDR")


def _package_domains(root: Path) -> list[Path]:
    """Top-level RAPL domains (intel-rapl:N / amd-rapl:N, not their sub-zones)."""
    return sorted(
        d for d in root.glob("*-rapl:*") if d.name.count(":") == 1 and (d / "energy_uj").exists()
    )


@dataclass
class RaplState:
    last: dict[Path, tuple[float, int]] = field(default_factory=dict)


def rapl_watts(root: Path, state: RaplState, now: float) -> float:
    """Mean package watts since the previous call (the first call primes the counters)."""
    domains = _package_domains(root)
    if not domains:
        raise PowerError(f"no RAPL package domains under {root}")
    total = 0.0
    primed = True
    for d in domains:
        try:
            energy = int((d / "energy_uj").read_text())
            wrap = int((d / "max_energy_range_uj").read_text())
        except (OSError, ValueError) as exc:
            raise PowerError(f"{d}: {exc}") from exc
        prev = state.last.get(d)
        state.last[d] = (now, energy)
        if prev is None:
            primed = False
            continue
        dt = now - prev[0]
        de = energy - prev[1] if energy >= prev[1] else energy + wrap - prev[1]
        if dt <= 0:
            raise PowerError("RAPL read twice at the same instant")
        if de == 0:
            raise PowerError(f"{d.name}/energy_uj does not advance (not exposed by this VM)")
        total += de / 1e6 / dt
    if not primed:
        raise PowerError("RAPL counters primed; watts from the next reading")
    return total


class IpmiShell:
    """One ``ipmitool ... shell`` child that runs a command per reading and keeps its
    session (over LAN) between them. Each command has the power timeout; a shell that
    times out or ends is closed, and the next command starts a fresh one. A session idle
    for ``IDLE_S`` is not trusted (BMCs end sessions after about 60 s of inactivity):
    the next command starts a fresh shell."""

    PROMPT = b"ipmitool> "
    IDLE_S = 30.0
    MAX_OUTPUT = 1 << 20

    def __init__(self, argv: list[str], timeout_s: float) -> None:
        self.argv, self.timeout_s = argv, timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._last_use = 0.0
        self.starts = 0

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _until_prompt(self, deadline: float, what: str) -> str:
        """Output up to the next prompt (PowerError when the shell ends or times out)."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while self.PROMPT not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise PowerError(f"{what} timed out after {self.timeout_s:g} s")
            ready, _, _ = select.select([fd], [], [], left)
            chunk = os.read(fd, 65536) if ready else None
            if chunk == b"" or len(self._buf) > self.MAX_OUTPUT:
                lines = self._buf.decode(errors="replace").strip().splitlines()
                self.close()
                raise PowerError(f"{what} failed: {lines[-1] if lines else 'ipmitool ended'}")
            self._buf += chunk or b""
        out, _, self._buf = self._buf.partition(self.PROMPT)
        return out.decode(errors="replace")

    def run(self, command: str) -> str:
        """The output of one ipmitool command (its echo included)."""
        what = f"ipmitool {command}"
        deadline = time.monotonic() + self.timeout_s
        if self.running and time.monotonic() - self._last_use > self.IDLE_S:
            self.close()
        if not self.running:
            self.close()
            try:
                self._proc = subprocess.Popen(
                    [*self.argv, "shell"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, bufsize=0,
                )  # fmt: skip
            except FileNotFoundError as exc:
                raise PowerError(f"{self.argv[0]} not found") from exc
            self.starts += 1
            self._until_prompt(deadline, what)  # the session is open at the first prompt
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(command.encode() + b"\n")
        except OSError as exc:
            self.close()
            raise PowerError(f"{what} failed: ipmitool shell ended ({exc})") from exc
        out = self._until_prompt(deadline, what)
        self._last_use = time.monotonic()
        return out

    def close(self) -> None:
        """End the shell (its session with it); nothing of it stays."""
        proc, self._proc, self._buf = self._proc, None, b""
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.write(b"exit\n")
                proc.stdin.close()
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()


class PowerReader:
    """Tries the configured methods in order; remembers each one's state."""

    def __init__(self, cfg: PowerConfig) -> None:
        self.cfg = cfg
        self.states: dict[str, str] = dict.fromkeys(cfg.methods, "not tried")
        self._rapl = RaplState()
        self._shell = IpmiShell(self._argv(), cfg.timeout_s)
        # method -> the shell start it last read through (see _ipmitool)
        self._worked: dict[str, int] = {}

    def _argv(self) -> list[str]:
        argv = list(self.cfg.ipmitool)
        if self.cfg.bmc_host:
            # -f: the password is read from a root-only file, never on the command line
            argv += [
                "-I",
                "lanplus",
                "-H",
                self.cfg.bmc_host,
                "-p",
                str(self.cfg.bmc_port),
                "-U",
                self.cfg.bmc_user,
                "-f",
                self.cfg.bmc_password_file,
                "-C",
                "3",
                "-N",
                "1",
                "-R",
                "1",
            ]
        return argv

    def _ipmitool(self, method: str, command: str, parse: Callable[[str], float]) -> float:
        """One reading through the shell. When a method that read through this shell
        before fails, the session may have ended under it: one retry in a fresh shell."""
        shell = self._shell
        for attempt in (1, 2):
            starts = shell.starts
            out = shell.run(command)
            try:
                watts = parse(out)
            except PowerError as exc:
                if attempt == 1 and shell.starts == starts == self._worked.get(method):
                    shell.close()
                    continue
                lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
                if lines and lines[0] == command:
                    lines.pop(0)  # the shell's echo of the command
                raise PowerError(
                    f"ipmitool {command} failed: {lines[-1] if lines else exc}"
                ) from exc
            self._worked[method] = shell.starts
            return watts
        raise AssertionError("unreachable")

    def _one(self, method: str) -> float:
        if method == "ipmi-dcmi":
            return self._ipmitool(method, "dcmi power reading", parse_dcmi)
        if method == "ipmi-sensor":
            return self._ipmitool(
                method, "sdr list full", lambda out: parse_sdr_watts(out, self.cfg.sensor)
            )
        return rapl_watts(Path(self.cfg.rapl_root), self._rapl, time.monotonic())

    def close(self) -> None:
        """End the ipmitool shell (the agent stops)."""
        self._shell.close()

    def read(self) -> PowerReading:
        for method in self.cfg.methods:
            try:
                watts = self._one(method)
            except PowerError as exc:
                self.states[method] = str(exc)
                continue
            self.states[method] = "ok"
            source: PowerSource = method  # type: ignore[assignment]
            return PowerReading(watts=watts, source=source)
        return PowerReading(watts=None, source="none")
