"""A process for a node container that holds MIB MiB of touched memory and keeps a hot
part of it dirty, checking its own memory as it goes (migration test and bench).

    python3 memhog.py MIB HOT_FRACTION STATE_FILE

Every page holds a known byte. The first HOT_FRACTION of the pages is rewritten once a
second, a tenth every 0.1 s (so HOT_FRACTION of the memory is dirtied per second), each
sweep with the next value; before a new sweep the whole hot part must hold the last
value, and every 5 s the rest must still hold its pattern. A lost or stale page after a
restore (a pre-copy round patched wrongly) shows up as "bad" in STATE_FILE, which is
rewritten every 0.1 s with the ticks done, so a frozen or dead process shows too.
Run it under setsid: CRIU dumps only a session whose leader is in the container.
"""

from __future__ import annotations

import json
import os
import sys
import time

PAGE = 4096


def main() -> None:
    mib, hot_fraction, state = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    buf = bytearray(mib * 2**20)
    pages = len(buf) // PAGE
    hot = max(1, int(pages * hot_fraction))
    pattern = bytes(i % 251 for i in range(pages))
    buf[::PAGE] = pattern  # touch every page: it is now resident and must be dumped
    cold_want = pattern[hot:]
    value, part, ticks, bad = 0, 0, 0, ""
    buf[: hot * PAGE : PAGE] = bytes([value]) * hot
    tenth = -(-hot // 10)
    with open(state + ".pid", "w") as f:
        f.write(str(os.getpid()))
    t_next = time.monotonic()
    while True:
        lo, hi = part * tenth, min(hot, (part + 1) * tenth)
        if lo < hi:
            buf[lo * PAGE : hi * PAGE : PAGE] = bytes([(value + 1) % 256]) * (hi - lo)
        part += 1
        if part == 10:
            value = (value + 1) % 256
            part = 0
            if buf[: hot * PAGE : PAGE] != bytes([value]) * hot and not bad:
                bad = f"hot pages not at sweep value {value} at tick {ticks}"
        if ticks % 50 == 0 and buf[hot * PAGE :: PAGE] != cold_want and not bad:
            bad = f"cold pages changed at tick {ticks}"
        ticks += 1
        tmp = state + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"ticks": ticks, "bad": bad, "pages": pages, "hot": hot}, f)
        os.replace(tmp, state)
        t_next += 0.1
        if t_next < time.monotonic() - 1.0:
            t_next = time.monotonic()  # after a freeze: no burst of catch-up ticks
        time.sleep(max(0.0, t_next - time.monotonic()))


if __name__ == "__main__":
    main()
