"""The gratuitous ARP frame, checked field by field, and sent on a real veth pair."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid

import pytest

from clavis_migrator.announce import garp_frame


def test_frame_is_an_arp_announcement() -> None:
    f = garp_frame("02:cb:01:02:03:04", "10.213.1.102")
    assert len(f) == 42
    assert f[:6] == b"\xff" * 6 and f[6:12] == bytes.fromhex("02cb01020304")
    assert f[12:14] == b"\x08\x06"
    arp = f[14:]
    assert arp[:8] == bytes.fromhex("0001080006040001")  # Ethernet/IPv4, request
    assert arp[8:14] == bytes.fromhex("02cb01020304")
    assert arp[14:18] == socket.inet_aton("10.213.1.102") == arp[24:28]
    assert arp[18:24] == b"\x00" * 6
    with pytest.raises(ValueError, match="not a MAC"):
        garp_frame("02:cb", "10.0.0.1")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a network namespace")
def test_announce_reaches_the_peer_of_a_veth() -> None:
    ns = f"migtest-{uuid.uuid4().hex[:8]}"
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, text=True, timeout=20)  # noqa: E731
    run("ip", "netns", "add", ns)
    try:
        run("ip", "-n", ns, "link", "add", "a0", "type", "veth", "peer", "name", "b0")
        run("ip", "-n", ns, "link", "set", "a0", "address", "02:cb:0a:0b:0c:0d")
        run("ip", "-n", ns, "addr", "add", "10.99.0.5/24", "dev", "a0")
        run("ip", "-n", ns, "link", "set", "a0", "up")
        run("ip", "-n", ns, "link", "set", "b0", "up")
        # listen on the peer end (from inside the netns), then announce from a0
        listener = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{ns}", "--", sys.executable, "-c",
             "import socket,sys;s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW,"
             "socket.htons(0x0806));s.bind(('b0',0));s.settimeout(10);"
             "print('ready',flush=True);print(s.recv(100).hex(),flush=True)"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert listener.stdout is not None
            assert listener.stdout.readline().strip() == "ready"
            out = run("nsenter", f"--net=/run/netns/{ns}", "--", sys.executable, "-m",
                      "clavis_migrator.announce")  # fmt: skip
            assert out.stdout.strip() == "10.99.0.5 on a0"
            got = listener.communicate(timeout=15)[0].strip()
        finally:
            if listener.poll() is None:
                listener.kill()
                listener.wait(timeout=10)
        assert bytes.fromhex(got)[:42] == garp_frame("02:cb:0a:0b:0c:0d", "10.99.0.5")
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False, timeout=20)
