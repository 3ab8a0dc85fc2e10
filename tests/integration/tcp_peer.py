"""TCP peers for the checkpoint test (stdlib only; runs inside and outside containers).

server HOST PORT LOG: accept ONE connection, echo each line back with "+1", and log
  "conn <peer>" once and "line <n>" per line to LOG (flushed), so the test can see
  that the same connection carries on after a checkpoint/restore.
client HOST PORT SECONDS: connect once, send an increasing counter every 0.1 s and
  check every echo; exit 1 on a wrong echo or a broken connection.
"""

from __future__ import annotations

import socket
import sys
import time


def server(host: str, port: int, log_path: str) -> int:
    with socket.create_server((host, port)) as srv, open(log_path, "a") as log:
        srv.settimeout(120)
        conn, peer = srv.accept()
        log.write(f"conn {peer[0]}:{peer[1]}\n")
        log.flush()
        with conn, conn.makefile("rw") as f:
            for line in f:
                n = int(line)
                f.write(f"{n + 1}\n")
                f.flush()
                log.write(f"line {n}\n")
                log.flush()
    return 0


def client(host: str, port: int, seconds: float) -> int:
    end = time.monotonic() + seconds
    with socket.create_connection((host, port), timeout=60) as s, s.makefile("rw") as f:
        n = 0
        while time.monotonic() < end:
            f.write(f"{n}\n")
            f.flush()
            reply = f.readline()
            if reply.strip() != str(n + 1):
                return 1
            n += 1
            time.sleep(0.1)
    return 0


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "server":
        sys.exit(server(sys.argv[2], int(sys.argv[3]), sys.argv[4]))
    sys.exit(client(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
