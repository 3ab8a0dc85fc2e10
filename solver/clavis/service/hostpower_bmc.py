"""One host's BMC, driven by ipmitool over RMCP+ (LAN+).

Manual equivalent: ``ipmitool -I lanplus -H ADDR -p PORT -U USER -f PWFILE -C 3
chassis power status|soft|off|on``. The password is only ever in a root-only file that
ipmitool reads (``-f``): never on a command line, in a log line or an audit row.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from clavis.service.auth import SecretFileError
from clavis_contracts.keys import KeyFileError, check_private

PowerState = Literal["on", "off"]
_STATUS = re.compile(r"Chassis Power is (on|off)", re.IGNORECASE)


class BmcPasswordError(SecretFileError):
    """The BMC password file is missing, open to group or others, or not root's."""


class BmcError(Exception):
    """The BMC did not answer, or refused the command; the message says which."""


def check_password_file(path: Path) -> None:
    """Refuse a password file that others may read or rewrite (the agents' key-file rule,
    ``clavis_contracts.keys.check_private``); clavisd never reads it, ipmitool does."""
    try:
        check_private(path, "BMC password")
    except KeyFileError as exc:
        raise BmcPasswordError(str(exc)) from exc
    if not path.is_file():
        raise BmcPasswordError(f"{path}: the BMC password file is not a regular file")


def parse_status(output: str) -> PowerState:
    """``on``/``off`` from ``ipmitool chassis power status`` ("Chassis Power is on")."""
    m = _STATUS.search(output)
    if m is None:
        raise BmcError(f"unexpected chassis power status output: {output.strip()[:200]!r}")
    return "on" if m.group(1).lower() == "on" else "off"


@dataclass(frozen=True)
class Bmc:
    address: str  # "addr:port"
    user: str
    password_file: Path
    ipmitool: tuple[str, ...] = ("ipmitool",)
    cipher_suite: int = 3
    timeout_s: float = 10.0

    def argv(self, *command: str) -> list[str]:
        addr, _, port = self.address.rpartition(":")
        # -N/-R: one session attempt a second, twice, so a dead BMC fails in ~2 s rather
        # than ipmitool's default four retries.
        return [*self.ipmitool, "-I", "lanplus", "-H", addr, "-p", port, "-U", self.user,
                "-f", str(self.password_file), "-C", str(self.cipher_suite),
                "-N", "1", "-R", "2", *command]  # fmt: skip

    def run(self, *command: str) -> str:
        what = "ipmitool " + " ".join(command)
        try:
            done = subprocess.run(self.argv(*command), capture_output=True, text=True,
                                  timeout=self.timeout_s, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise BmcError(f"{what}: no answer within {self.timeout_s:g} s") from None
        except OSError as exc:
            raise BmcError(f"{what}: cannot run ipmitool: {exc.strerror}") from None
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip()).splitlines()
            raise BmcError(f"{what} failed: {last[-1][:200] if last else done.returncode}")
        return done.stdout

    def status(self) -> PowerState:
        return parse_status(self.run("chassis", "power", "status"))

    def command(self, action: Literal["soft", "off", "on"]) -> None:
        self.run("chassis", "power", action)
