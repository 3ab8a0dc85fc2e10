"""Emulated miss counters: a testbed's stand-in for a PMU, read only when configured.

Machines without hardware counters (the development machine, most VMs) cannot measure
memory intensity. The testbed emulates a per-container counter from the processes' real
CPU time and a declared per-program profile (docs/testbed.md, "Emulated miss
counters"), writing each container's cumulative counts to ``DIR/NAME.json``. This source
reads them when ``[emulation] miss_counters_dir`` names that directory (off by default);
every value it gives is reported with the intensity source ``emulated`` and labelled so
in /metrics, never as ``perf``. On a host whose hardware counters work the agent uses
perf and ignores this setting.

Manual equivalent: ``cat DIR/NAME.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from clavis_monitor.perf import Counts, UnsupportedError

FORMAT = "clavis-testbed.misses/1"
MAX_BYTES = 4096
STALE_S = 10.0  # a file not rewritten for this long: its writer has stopped


def parse(name: str, text: str, now: float) -> Counts:
    """Counts from one container's file; UnsupportedError says what is wrong with it."""
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} document")
        if doc.get("container") != name:
            raise ValueError(f"written for container {doc.get('container')!r}")
        values = [doc["instructions"], doc["llc_misses"], doc.get("prefetches", 0)]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            raise ValueError("counts must be integers >= 0")
        updated = float(doc["updated"])
    except (ValueError, KeyError, TypeError) as exc:
        raise UnsupportedError(f"emulated counters of {name}: {exc}") from exc
    if now - updated > STALE_S:
        raise UnsupportedError(
            f"emulated counters of {name} not updated for {now - updated:.0f} s (is the "
            "testbed's missd running?)"
        )
    return Counts(values[0], values[1], values[2])


class EmulatedCounters:
    """A CounterSource (clavis_monitor.perf) over the testbed's per-container files."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def probe(self) -> None:
        if not self.dir.is_dir():
            raise UnsupportedError(f"emulated counters directory {self.dir} does not exist")

    def read(self, container: str, cgroup: Path | None) -> Counts:
        path = self.dir / f"{container}.json"
        try:
            with path.open("rb") as fh:
                data = fh.read(MAX_BYTES + 1)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise UnsupportedError(f"no emulated counters for {container}: {why}") from None
        if len(data) > MAX_BYTES:
            raise UnsupportedError(f"emulated counters of {container}: over {MAX_BYTES} bytes")
        return parse(container, data.decode("utf-8", "replace"), time.time())

    def forget(self, container: str) -> None:
        """Nothing is held open per container."""
