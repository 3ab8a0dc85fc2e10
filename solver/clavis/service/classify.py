"""Devil/turtle classification with hysteresis, per container and per job (pure).

DINO (thesis §3.3.3) changes a thread's class only when "at least 7 out of the last 10
intervals" fall in the new class, so a noisy miss rate does not trigger migrations; a
container here is classified the same way from its per-interval intensity. A sample
without counters (source "unsupported") casts no vote. A job is a devil when any of its
containers is one: under the straggler rule (thesis §5.5) one contended devil container
slows the whole job. Per-application memory follows ReSense (Dey et al. 2013, §2.2): the
class is a property of the application, learnt once and applied to its next jobs before
their first sample.

A user's class hint (``sbatch --clavis-class=devil|turtle``, reported with the
container) overrides the measured class wherever a class is used (repacking, the
advice, the API) but never enters the hysteresis or the per-application memory: those
learn from measurements only, so a wrong hint does not teach the next job. A container
with neither a hint, a class nor a measured intensity is ``unknown``: it is placed as a
turtle (nothing says it contends) but never advertised as one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

Klass = Literal["devil", "turtle"]
Shown = Literal["devil", "turtle", "unknown"]
ClassSource = Literal["samples", "memory", "none"]
# Where an effective class came from: the user's hint, the hysteresis class (samples or
# the application's memory), the last sample alone (before the window has decided), or
# nothing at all.
EffectiveSource = Literal["hint", "samples", "memory", "last-sample", "none"]
_VOTE = {"devil": "d", "turtle": "t"}


@dataclass(frozen=True)
class Hysteresis:
    window: int = 10
    votes: int = 7

    def __post_init__(self) -> None:
        if not 1 <= self.votes <= self.window:
            raise ValueError(f"votes ({self.votes}) must be between 1 and window ({self.window})")


@dataclass(frozen=True)
class ClassState:
    klass: Klass | None = None
    source: ClassSource = "none"
    votes: str = ""  # newest last; "d" devil, "t" turtle


def vote(intensity_mpki: float | None, threshold_mpki: float) -> Klass | None:
    """One interval's class; None when the host has no counters."""
    if intensity_mpki is None:
        return None
    return "devil" if intensity_mpki >= threshold_mpki else "turtle"


def observe(state: ClassState, sample: Klass | None, rule: Hysteresis) -> ClassState:
    """Add one interval's vote; switch class only when the window votes for it enough."""
    if sample is None:
        return state
    votes = (state.votes + _VOTE[sample])[-rule.window :]
    for klass, mark in _VOTE.items():
        if klass != state.klass and votes.count(mark) >= rule.votes:
            return ClassState(klass, "samples", votes)  # type: ignore[arg-type]
    # A class taken from the application's memory is the container's own once its window
    # confirms it: "memory" means "assumed, not yet measured here".
    if state.source == "memory" and state.klass and votes.count(_VOTE[state.klass]) >= rule.votes:
        return ClassState(state.klass, "samples", votes)
    return ClassState(state.klass, state.source, votes)


def effective(
    klass: Klass | None,
    source: str,
    hint: Klass | None,
    intensity_mpki: float | None,
    threshold_mpki: float,
) -> tuple[Shown, EffectiveSource]:
    """The class a container is treated as now, and why: the hint, else its hysteresis
    class, else its last intensity against its host's threshold, else unknown."""
    if hint is not None:
        return hint, "hint"
    if klass is not None:
        return klass, "memory" if source == "memory" else "samples"
    last = vote(intensity_mpki, threshold_mpki)
    if last is not None:
        return last, "last-sample"
    return "unknown", "none"


def remembered(app_class: Klass | None) -> ClassState:
    """Initial state of a new container: its application's class, if one is known."""
    return ClassState(app_class, "memory") if app_class else ClassState()


def job_class(container_classes: Iterable[Klass | None]) -> Klass | None:
    """Devil if any container is a devil; turtle if all are known turtles; else unknown."""
    classes = list(container_classes)
    if "devil" in classes:
        return "devil"
    if classes and all(c == "turtle" for c in classes):
        return "turtle"
    return None


def threshold_for(host: str, default: float, by_prefix: Mapping[str, float]) -> float:
    """Per host model thresholds (DINO §3.3.3: classes are architecture-specific), keyed by
    host-name prefix; the longest matching prefix wins."""
    best = max((p for p in by_prefix if host.startswith(p)), key=len, default=None)
    return default if best is None else by_prefix[best]


@dataclass(frozen=True)
class Thresholds:
    """Every host's devil threshold (``classify.devil_threshold_mpki`` and
    ``classify.host_thresholds``): the one lookup ingest, repacking, the advice and the
    API use."""

    default: float
    by_prefix: Mapping[str, float]

    def of(self, host: str) -> float:
        return threshold_for(host, self.default, self.by_prefix)

    def vote(self, host: str, intensity_mpki: float | None) -> Klass | None:
        """What one sample of a container on ``host`` votes (None: no counters)."""
        return vote(intensity_mpki, self.of(host))
