"""Response and request bodies of the REST API (what the OpenAPI document describes)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


class LoginIn(_Out):
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
    klass: Literal["devil", "turtle"] | None
    class_source: str
    votes: str
    traffic: dict[str, float]
    updated: float


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


class ProposedPlan(_Out):
    """A dry run's plan: computed and shown, never stored."""

    f_current: float
    f_target: float
    summary: dict[str, Any]
    steps: list[ProposedStep]


class RepackIn(_Out):
    apply: bool = Field(
        default=False,
        description="Store the plan and start it; false is a dry run that stores nothing.",
    )


class RepackOut(_Out):
    decision: Literal["no-change", "below-margin", "planned", "busy", "no-solution"]
    f_current: float | None
    f_target: float | None
    message: str
    plan: PlanOut | None = Field(description="The stored plan (with apply).")
    proposal: ProposedPlan | None = Field(
        description="A dry run's plan, not stored: nothing changed."
    )


class WeightsOut(_Out):
    P: float
    D: float
    C: float
    M: float
    source: Literal["calibrated", "configured"]
