"""Tell a layer-2 network where a restored container now is: gratuitous ARP.

A container that moved keeps its IP and MAC, but every bridge between the hosts still
sends its frames to the old host's port until the container sends something through them.
A hypervisor does the same after a live migration: it broadcasts a gratuitous ARP (an ARP
request for its own address, RFC 5227 §3 "ARP Announcement") from the moved interface, so
every bridge learns the new port and every neighbour refreshes its entry at once.

Run inside the container's netns: ``nsenter --net=/proc/PID/ns/net -- python3 -m
clavis_migrator.announce`` (the backend does that); it announces every IPv4 address of
every interface but ``lo``, three times, and prints what it announced.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import sys
import time
from typing import Final

from clavis_migrator.backend import BackendError

ETH_P_ARP: Final = 0x0806
BROADCAST: Final = b"\xff" * 6


def garp_frame(mac: str, ip: str) -> bytes:
    """An Ethernet broadcast frame holding an ARP announcement of ``ip`` at ``mac``."""
    hw = bytes.fromhex(mac.replace(":", ""))
    if len(hw) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    addr = ipaddress.IPv4Address(ip).packed
    eth = BROADCAST + hw + ETH_P_ARP.to_bytes(2, "big")
    # htype Ethernet, ptype IPv4, hlen 6, plen 4, op request; sender = target = ip
    arp = (
        (1).to_bytes(2, "big") + (0x0800).to_bytes(2, "big") + bytes([6, 4])
        + (1).to_bytes(2, "big") + hw + addr + b"\x00" * 6 + addr
    )  # fmt: skip
    return eth + arp


def addresses() -> list[tuple[str, str, str]]:
    """(interface, MAC, IPv4) of this netns, ``lo`` excluded (from ``ip -j addr``)."""
    out = subprocess.run(
        ["ip", "-j", "addr", "show"], capture_output=True, text=True, timeout=10, check=True
    ).stdout
    found = []
    for link in json.loads(out):
        if link.get("ifname") == "lo" or not link.get("address"):
            continue
        for a in link.get("addr_info", []):
            if a.get("family") == "inet":
                found.append((str(link["ifname"]), str(link["address"]), str(a["local"])))
    return found


def from_netns(pid: int, timeout_s: float = 30) -> str:
    """Announce from the netns of process ``pid`` (a restored container's init), as the
    backends do after a restore; what was announced, or BackendError."""
    argv = [
        "nsenter",
        f"--net=/proc/{pid}/ns/net",
        "--",
        sys.executable,
        "-m",
        "clavis_migrator.announce",
    ]
    try:
        cp = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s,
            stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError(f"gratuitous ARP: {exc}") from exc
    if cp.returncode != 0:
        raise BackendError(f"gratuitous ARP failed: {cp.stderr.strip()[-300:]}")
    return cp.stdout.strip() or "nothing (no IPv4 address)"


def main() -> int:
    said = []
    for ifname, mac, ip in addresses():
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
            s.bind((ifname, 0))
            frame = garp_frame(mac, ip)
            for i in range(3):
                s.send(frame)
                if i < 2:
                    time.sleep(0.05)
        said.append(f"{ip} on {ifname}")
    print(", ".join(said))
    return 0


if __name__ == "__main__":
    sys.exit(main())
