"""The audit trail for the UI's History page (issue 16): every calibration made current
(who, when, which method and weights, from which picks and front) and every class change
the hysteresis or the application memory decided. Plans and their steps are /plans.
Viewers read; nothing here changes anything."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict

from clavis.model import ObjectiveValues, WeightsFile

Limit = Annotated[int, Query(ge=1, le=5000, description="Newest entries first, at most this many.")]


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CalibrationEntry(_Out):
    id: int
    created: float
    user: str
    method: Literal["thesis", "inverse"]
    weights: ObjectiveValues
    picks: list[int]
    front_sha256: str


class ClassChange(_Out):
    id: int
    ts: float
    container: str
    job: str | None
    klass: str
    source: str


def router(viewer: Any, errors: dict[int | str, dict[str, Any]]) -> APIRouter:
    r = APIRouter(prefix="/api/v1/history")

    @r.get("/calibrations", response_model=list[CalibrationEntry], responses=errors)
    def calibrations(
        request: Request, limit: Limit = 500, _: str = viewer
    ) -> list[CalibrationEntry]:
        """Weights made current, newest first (POST /weights or /fronts/{id}/picks)."""
        out = []
        for row in request.app.state.clavisd.store.weights_history(limit):
            doc = WeightsFile.model_validate_json(row.doc)
            out.append(CalibrationEntry(id=row.id, created=row.created, user=row.user,
                                        method=doc.method, weights=doc.weights, picks=doc.picks,
                                        front_sha256=doc.front_sha256))  # fmt: skip
        return out

    @r.get("/class-changes", response_model=list[ClassChange], responses=errors)
    def class_changes(request: Request, limit: Limit = 500, _: str = viewer) -> list[ClassChange]:
        """Containers' class changes, newest first (docs/clavisd.md, classification)."""
        return [ClassChange(id=x.id, ts=x.ts, container=x.container, job=x.job, klass=x.klass,
                            source=x.source)
                for x in request.app.state.clavisd.store.class_changes(limit)]  # fmt: skip

    return r
