"""What the store returns: one frozen dataclass per kind of row (issue 15: a typed store,
no dicts of column names). store.py makes them from its tables, and nothing else does;
the API turns them into its schemas (schemas.py) and the repack executor a stored step
into the agents' contract (clavis_contracts.MigrationStep).

A plan's step is plan.Step (the one step type); the store keeps it with its progress as
a StoredStep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clavis.service.classify import ClassSource, Klass
from clavis.service.plan import Step


@dataclass(frozen=True)
class HostRow:
    """A host of the cluster file and its newest report (None until it has reported)."""

    name: str
    rack: str
    cores: int
    last_report: float | None
    busy_cores: float | None
    watts: float | None


@dataclass(frozen=True)
class ContainerRow:
    """A container as its host's newest report lists it, with its class state."""

    name: str
    host: str
    job: str | None
    app: str | None
    cores: int
    memory_bytes: int
    busy_cores: float
    intensity_mpki: float | None  # None: its host has no counters
    klass: Klass | None  # the hysteresis class; None until the votes decide
    class_source: ClassSource
    votes: str
    traffic: dict[str, float]  # peer -> bytes/s of the newest sample
    updated: float
    class_hint: Klass | None


@dataclass(frozen=True)
class PlacementInput:
    """What the advice depends on of a container (not its traffic): cheap enough to read
    every few seconds."""

    name: str
    host: str
    job: str | None
    cores: int
    memory_bytes: int
    klass: Klass | None
    class_hint: Klass | None
    intensity_mpki: float | None


@dataclass(frozen=True)
class JobRow:
    name: str
    app: str
    klass: Klass | None
    updated: float


@dataclass(frozen=True)
class AppClassRow:
    """An application's remembered class (ReSense per-application memory)."""

    app: str
    klass: str
    jobs_seen: int
    updated: float


@dataclass(frozen=True)
class PowerModelRow:
    """A host's fitted power model: idle_w + slope_w x busy cores."""

    host: str
    idle_w: float
    slope_w: float
    r2: float
    rmse_w: float
    samples: int
    fitted: float


@dataclass(frozen=True)
class Session:
    """A stored UI session: who, the role granted, what it was granted from, until when."""

    user: str
    role: str
    credential: str
    expires: float


@dataclass(frozen=True)
class FrontRow:
    """A stored front document (`clavis pareto`'s format) as it was posted."""

    id: int
    created: float
    doc: str


@dataclass(frozen=True)
class WeightsRow:
    """A weights file made current (a WeightsFile document), by whom and when."""

    id: int
    created: float
    user: str
    doc: str


@dataclass(frozen=True)
class ClassChangeRow:
    """A container's class change."""

    id: int
    container: str
    job: str | None
    klass: str
    source: str
    ts: float


@dataclass(frozen=True)
class PlanRow:
    id: int
    created: float
    updated: float
    state: str
    f_current: float
    f_target: float
    summary: dict[str, Any]
    message: str


@dataclass(frozen=True)
class StoredStep:
    """A plan's step as the store keeps it: which plan, the step, how far it got."""

    plan: int
    step: Step
    state: str
    dispatches: int
    message: str
    updated: float


@dataclass(frozen=True)
class StepEvent:
    """One entry of a plan's audit log; ``idx`` None: an event of the whole plan."""

    id: int
    plan: int
    idx: int | None
    state: str
    message: str
    ts: float
