"""How clavisd's processes use Python's cyclic garbage collector (a tuning, measured by
bench/ingest: docs/benchmarks.md)."""

from __future__ import annotations

import gc


def long_lived_heap() -> None:
    """After start-up: move what exists now (modules, schemas, the solver's tables) out of
    the cyclic collector's view, and collect young objects less often. Every report
    allocates thousands of short-lived objects, so with the defaults the collector ran
    often and its older generations kept walking the whole start-up heap; in the ingest
    benchmark this saves about a tenth of clavisd's CPU per report and its pauses."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
