"""Network namespaces a test creates (and removes): a host with a bridge and peers."""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass, field


def sh(*argv: str, timeout: float = 20) -> str:
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if cp.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {cp.stderr.strip()}")
    return cp.stdout


def in_ns(ns: str, *argv: str, timeout: float = 20) -> str:
    # nsenter, not `ip netns exec` (that remounts /sys: TESTBED-NOTES)
    return sh("nsenter", f"--net=/run/netns/{ns}", "--", *argv, timeout=timeout)


@dataclass
class Net:
    """A host namespace with bridge br0 (10.77.1.1/24) and a routed link (10.77.2.1/24);
    ``add_bridged``/``add_routed`` put a peer namespace on either."""

    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    names: list[str] = field(default_factory=list)

    @property
    def host(self) -> str:
        return f"cmh-{self.tag}"

    def _ns(self, name: str) -> str:
        sh("ip", "netns", "add", name)
        self.names.append(name)
        in_ns(name, "ip", "link", "set", "lo", "up")
        return name

    def up(self) -> Net:
        h = self._ns(self.host)
        in_ns(h, "ip", "link", "add", "br0", "type", "bridge")
        in_ns(h, "ip", "addr", "add", "10.77.1.1/24", "dev", "br0")
        in_ns(h, "ip", "link", "set", "br0", "up")
        in_ns(h, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        return self

    def add_bridged(self, short: str, addr: str) -> str:
        ns = self._ns(f"cm{short}-{self.tag}")
        hv = f"v{short}{self.tag}"[:15]
        sh(
            "ip",
            "link",
            "add",
            hv,
            "netns",
            self.host,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns,
        )
        in_ns(self.host, "ip", "link", "set", hv, "master", "br0", "up")
        in_ns(ns, "ip", "addr", "add", f"{addr}/24", "dev", "eth0")
        in_ns(ns, "ip", "link", "set", "eth0", "up")
        in_ns(ns, "ip", "route", "add", "default", "via", "10.77.1.1")
        return ns

    def add_routed(self, short: str, addr: str) -> str:
        ns = self._ns(f"cm{short}-{self.tag}")
        hv = f"r{short}{self.tag}"[:15]
        sh(
            "ip",
            "link",
            "add",
            hv,
            "netns",
            self.host,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns,
        )
        in_ns(self.host, "ip", "addr", "add", "10.77.2.1/24", "dev", hv)
        in_ns(self.host, "ip", "link", "set", hv, "up")
        in_ns(ns, "ip", "addr", "add", f"{addr}/24", "dev", "eth0")
        in_ns(ns, "ip", "link", "set", "eth0", "up")
        in_ns(ns, "ip", "route", "add", "default", "via", "10.77.2.1")
        return ns

    def down(self) -> None:
        for name in reversed(self.names):
            subprocess.run(
                ["ip", "netns", "del", name], capture_output=True, timeout=20, check=False
            )
        self.names.clear()
