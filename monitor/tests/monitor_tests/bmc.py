"""A real ipmi_sim BMC on loopback, built from the testbed's pieces (deploy/testbed/ctb/
bmc.py: the Watts SDR record, our DCMI loadlib module, chassis control) in a test dir."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "deploy" / "testbed"))
from ctb import bmc as ctb_bmc  # noqa: E402


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Bmc:
    """ipmi_sim with a Watts sensor and DCMI reading ``watts``; ended by its own PID."""

    def __init__(self, d: Path) -> None:
        self.dir = d
        self.port = free_udp_port()
        self.password_file = d / "password"
        self.watts = d / "watts"
        self.proc: subprocess.Popen[bytes] | None = None

    def set_watts(self, w: int) -> None:
        tmp = self.watts.with_suffix(".tmp")
        tmp.write_text(f"{w}\n")
        os.replace(tmp, self.watts)

    def start(self, watts: int = 150) -> Bmc:
        d = self.dir
        (d / "state").mkdir(parents=True, exist_ok=True)
        module = d / "dcmi_power.so"
        subprocess.run(["cc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC",
                        "-shared", "-o", str(module), str(ctb_bmc.MODULE_SRC)],
                       check=True, timeout=60)  # fmt: skip
        self.set_watts(watts)
        (d / "power").write_text("1\n")
        password = secrets.token_hex(8)
        self.password_file.write_text(password + "\n")
        self.password_file.chmod(0o600)
        (d / "lan.conf").write_text(
            f"name \"monitor-test\"\nset_working_mc 0x20\n  startlan 1\n"
            f"    addr 127.0.0.1 {self.port}\n    priv_limit admin\n"
            "    allowed_auths_callback none md2 md5 straight\n"
            "    allowed_auths_user none md2 md5 straight\n"
            "    allowed_auths_operator none md2 md5 straight\n"
            "    allowed_auths_admin none md2 md5 straight\n"
            f"    guid {secrets.token_hex(16)}\n  endlan\n"
            f"  chassis_control \"{ctb_bmc.CHASSIS} {d}\"\n"
            f"  user 2 true \"admin\" \"{password}\" admin 10 none md2 md5 straight\n"
            f"loadlib \"{module}\" \"{self.watts}\"\n"
        )  # fmt: skip
        sdr = " ".join(f"0x{b:02x}" for b in ctb_bmc._sdr("Host Power"))
        (d / "sim.emu").write_text(
            "mc_setbmc 0x20\n"
            "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n"
            "sel_enable 0x20 1000 0x0a\n"
            f"main_sdr_add 0x20 {sdr}\n"
            f"sensor_add 0x20 0 {ctb_bmc.SENSOR_NUM} 0x0b 0x01 poll 500 file \"{self.watts}\" "
            f"div={ctb_bmc.WATTS_M}\n"
            "mc_enable 0x20\n"
        )  # fmt: skip
        with (d / "ipmi_sim.log").open("ab") as log:
            self.proc = subprocess.Popen(
                ["ipmi_sim", "-c", str(d / "lan.conf"), "-f", str(d / "sim.emu"),
                 "-s", str(d / "state"), "-n"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self._wait_ready()
        return self

    def ipmitool(self, *args: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
        argv = ["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(self.port), "-U",
                "admin", "-f", str(self.password_file), "-C", "3", *args]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.ipmitool("chassis", "power", "status", timeout=5).returncode == 0:
                return
            time.sleep(0.2)
        raise AssertionError(f"ipmi_sim did not answer: {(self.dir / 'ipmi_sim.log').read_text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None
