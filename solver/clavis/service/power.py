"""Per-host power models fitted from (busy cores, IPMI watts) samples (pure).

P = idle_w + slope_w * busy_cores (docs/objectives.md, P), by ordinary least squares.
Fit quality is R² and the RMSE in watts; a fit needs samples at several utilisation
levels, or the slope is not identifiable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIN_SAMPLES = 5
MIN_SPREAD_CORES = 0.5


class FitError(ValueError):
    """The samples cannot determine a power model; the message says what is missing."""


@dataclass(frozen=True)
class PowerFit:
    idle_w: float
    slope_w: float  # watts per busy core
    r2: float
    rmse_w: float
    samples: int

    def peak_w(self, cores: int) -> float:
        return self.idle_w + self.slope_w * cores


def fit(busy_cores: Sequence[float], watts: Sequence[float]) -> PowerFit:
    if len(busy_cores) != len(watts):
        raise FitError("busy_cores and watts differ in length")
    n = len(watts)
    if n < MIN_SAMPLES:
        raise FitError(f"{n} samples with watts; need at least {MIN_SAMPLES}")
    mx = math.fsum(busy_cores) / n
    my = math.fsum(watts) / n
    sxx = math.fsum((x - mx) ** 2 for x in busy_cores)
    if max(busy_cores) - min(busy_cores) < MIN_SPREAD_CORES or sxx <= 0:
        raise FitError(
            f"utilisation spans {max(busy_cores) - min(busy_cores):.2f} busy cores; need at "
            f"least {MIN_SPREAD_CORES} to tell idle power from the per-core slope"
        )
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(busy_cores, watts, strict=True))
    slope = sxy / sxx
    idle = my - slope * mx
    residual = math.fsum(
        (y - idle - slope * x) ** 2 for x, y in zip(busy_cores, watts, strict=True)
    )
    total = math.fsum((y - my) ** 2 for y in watts)
    r2 = 1.0 - residual / total if total > 0 else 1.0
    return PowerFit(idle, slope, r2, math.sqrt(residual / n), n)
