"""Host power: DCMI power reading, else an SDR Watts sensor, else RAPL powercap.

Manual equivalents: ``ipmitool [-I lanplus -H BMC -p PORT -U USER -f PWFILE -C 3] dcmi
power reading``, ``ipmitool sdr type "Other Units-based Sensor"`` / ``sdr list full``,
``cat /sys/class/powercap/intel-rapl:*/energy_uj``. Every method has a timeout and
leaves a one-line state (``ok`` or why not) for /metrics; when none works the reading is
``{"watts": null, "source": "none"}``.
"""

from __future__ import annotations

import re
import subprocess
import time
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


class PowerReader:
    """Tries the configured methods in order; remembers each one's state."""

    def __init__(self, cfg: PowerConfig) -> None:
        self.cfg = cfg
        self.states: dict[str, str] = dict.fromkeys(cfg.methods, "not tried")
        self._rapl = RaplState()

    def _ipmitool(self, *args: str) -> str:
        argv = [self.cfg.ipmitool]
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
        argv += list(args)
        try:
            cp = subprocess.run(
                argv, capture_output=True, text=True, timeout=self.cfg.timeout_s, check=False
            )
        except FileNotFoundError as exc:
            raise PowerError(f"{self.cfg.ipmitool} not found") from exc
        except subprocess.TimeoutExpired as exc:
            raise PowerError(
                f"ipmitool {' '.join(args)} timed out after {self.cfg.timeout_s:g} s"
            ) from exc
        if cp.returncode != 0:
            err = (cp.stderr or cp.stdout).strip().splitlines()
            raise PowerError(
                f"ipmitool {' '.join(args)} failed: {err[-1] if err else cp.returncode}"
            )
        return cp.stdout

    def _one(self, method: str) -> float:
        if method == "ipmi-dcmi":
            return parse_dcmi(self._ipmitool("dcmi", "power", "reading"))
        if method == "ipmi-sensor":
            return parse_sdr_watts(self._ipmitool("sdr", "list", "full"), self.cfg.sensor)
        return rapl_watts(Path(self.cfg.rapl_root), self._rapl, time.monotonic())

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
