"""Response and request bodies of the REST API (what the OpenAPI document describes),
and the one place each of the planner's and the store's types becomes its API form."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from clavis.service.plan import Move, Step
from clavis.service.rows import PlanRow, StoredStep


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _In(BaseModel):
    """A request body: strict types (no `true` for 1, no "2" for 2) and no NaN or infinity,
    so a client's mistake is refused by name rather than silently changed."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class ErrorBody(_Out):
    detail: str


class Health(_Out):
    status: Literal["ok"]
    schema_versions: list[int]
    reports_stored: int


class ReportAccepted(_Out):
    host: str
    timestamp: float
    containers: int


class LoginIn(_In):
    user: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=1024)


class LoginOut(_Out):
    token: str
    role: Literal["admin", "viewer"]
    expires: float


class HostOut(_Out):
    name: str
    rack: str
    cores: int
    last_report: float | None
    busy_cores: float | None
    watts: float | None


class ContainerOut(_Out):
    name: str
    host: str
    job: str | None
    app: str | None
    cores: int
    memory_bytes: int
    busy_cores: float
    intensity_mpki: float | None
    klass: Literal["devil", "turtle"] | None = Field(
        description="The measured class (hysteresis over the votes, or the application's "
        "memory); null until decided."
    )
    class_source: str
    votes: str
    traffic: dict[str, float]
    updated: float
    class_hint: Literal["devil", "turtle"] | None = Field(
        description="The user's --clavis-class for the job in it, if it names a class."
    )
    effective_class: Literal["devil", "turtle", "unknown"] = Field(
        description="What repacking and the advice treat it as: the hint, else the measured "
        "class, else its last intensity against its host's threshold, else unknown."
    )
    effective_source: Literal["hint", "samples", "memory", "last-sample", "none"]


class JobOut(_Out):
    name: str
    app: str
    klass: Literal["devil", "turtle"] | None
    updated: float


class PowerModelOut(_Out):
    host: str
    idle_w: float
    slope_w: float
    r2: float
    rmse_w: float
    samples: int
    fitted: float


class PowerFitOut(_Out):
    fitted: list[PowerModelOut]
    refused: dict[str, str] = Field(description="Host -> why no model could be fitted.")


class ProposedStep(_Out):
    idx: int
    wave: int
    container: str
    source: str
    target: str
    cores: int
    memory_bytes: int


class DeferredMove(_Out):
    """A move of the solver's placement that no wave can take (a cycle of full hosts with
    no host to stage on): not run; the container stays on ``source``."""

    container: str
    source: str
    target: str
    cores: int
    memory_bytes: int


class StepOut(ProposedStep):
    """A stored step: the proposed move and how it went."""

    state: str
    dispatches: int
    message: str
    updated: float


class PlanOut(_Out):
    id: int
    created: float
    updated: float
    state: str
    f_current: float
    f_target: float
    summary: dict[str, Any]
    message: str
    steps: list[StepOut]
    deferred: list[DeferredMove] = Field(
        description="Moves of the solver's placement not run; f_target is what the steps reach."
    )


class ProposedPlan(_Out):
    """A plan computed and shown, never stored: a dry run's, or one whose runnable steps
    would not reach the margin because moves are deferred (decision ``deferred``)."""

    f_current: float
    f_target: float = Field(description="F after the steps (deferred moves not made).")
    f_solver: float = Field(description="F of the solver's placement (every move made).")
    summary: dict[str, Any]
    steps: list[ProposedStep]
    deferred: list[DeferredMove]


class RepackIn(_In):
    apply: bool = Field(
        default=False,
        description="Store the plan and start it; false is a dry run that stores nothing.",
    )


class RepackOut(_Out):
    decision: Literal["no-change", "below-margin", "planned", "deferred", "busy", "no-solution"] = (
        Field(description="deferred: the solver's placement needs moves no wave can take and "
              "the steps that can run would gain no more than repack.margin; nothing stored "
              "or started (the proposal names the deferred moves).")
    )  # fmt: skip
    f_current: float | None
    f_target: float | None
    message: str
    plan: PlanOut | None = Field(description="The stored plan (with apply).")
    proposal: ProposedPlan | None = Field(
        description="A plan not stored (a dry run's, or a deferred one): nothing changed."
    )


class WeightsOut(_Out):
    P: float
    D: float
    C: float
    M: float
    source: Literal["calibrated", "configured"]


# --- the planner's and the store's types in their API form ------------------------------


def proposed_step(s: Step) -> ProposedStep:
    m = s.move
    return ProposedStep(idx=s.index, wave=s.wave, container=m.container, source=m.source,
                        target=m.target, cores=m.cores, memory_bytes=m.memory_bytes)  # fmt: skip


def deferred_move(m: Move) -> DeferredMove:
    return DeferredMove(**asdict(m))


def step_out(s: StoredStep) -> StepOut:
    return StepOut(**proposed_step(s.step).model_dump(), state=s.state,
                   dispatches=s.dispatches, message=s.message, updated=s.updated)  # fmt: skip


def plan_out(p: PlanRow, steps: Sequence[StoredStep]) -> PlanOut:
    # Plans stored before deferred moves were described kept only their containers' names.
    deferred = [DeferredMove(**m) for m in p.summary.get("deferred", []) if isinstance(m, dict)]
    return PlanOut(**asdict(p), steps=[step_out(st) for st in steps], deferred=deferred)
