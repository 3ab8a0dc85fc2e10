"""Fronts, picks and weights over the API: the admin's calibration (thesis §5.5.1) through
clavisd, with every front and pick kept in the store for audit (docs/calibration.md)."""

from __future__ import annotations

import hashlib
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from clavis.calibrate import CalibrationError, calibrate_picks
from clavis.documents import describe
from clavis.model import Front, WeightsFile
from clavis.service.edge import Service, service
from clavis.service.snapshot import cluster_mismatch

MAX_FRONT_BYTES = 64 * 2**20
FrontId = Annotated[int, Path(ge=1, le=2**62)]


class FrontSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int
    created: float
    points: int
    objectives: list[str]
    sha256: str


class PicksIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    picks: list[int] = Field(min_length=3, max_length=1000, json_schema_extra={"uniqueItems": True})
    method: Literal["thesis", "inverse"] | None = None


class PicksOut(BaseModel):
    model_config = ConfigDict(extra="forbid")
    weights: WeightsFile
    weights_id: int


def _front_row(d: Service, front_id: int) -> tuple[Front, str]:
    row = d.store.front(front_id)
    if row is None:
        raise HTTPException(404, f"no front {front_id}")
    return Front.model_validate_json(row.doc), hashlib.sha256(row.doc.encode()).hexdigest()


def router(admin: Any, viewer: Any, errors: dict[int | str, dict[str, Any]]) -> APIRouter:
    r = APIRouter(prefix="/api/v1")

    body_doc = {"$ref": "#/components/schemas/Front"}
    refusals: dict[int | str, dict[str, Any]] = {413: errors[401], 422: errors[401]}

    @r.post(
        "/fronts",
        response_model=FrontSummary,
        responses={**errors, **refusals},
        openapi_extra={
            "requestBody": {"required": True, "content": {"application/json": {"schema": body_doc}}}
        },
    )
    async def post_front(request: Request, _: str = admin) -> FrontSummary:
        """Store a front from `clavis pareto` for the admin to pick from."""
        body = await request.body()
        if len(body) > MAX_FRONT_BYTES:
            raise HTTPException(413, f"front exceeds {MAX_FRONT_BYTES} bytes")
        try:
            front = Front.model_validate_json(body, strict=True)
        except ValidationError as exc:
            raise HTTPException(422, f"malformed front: {describe(exc, None)}") from None
        d = service(request)
        other = cluster_mismatch(front.cluster, d.cluster)
        if other is not None:
            raise HTTPException(422, f"front is for another cluster: {other}")
        text, now = body.decode(), time.time()
        return _summary(d.store.add_front(text, now), now, front, text)

    @r.get("/fronts", response_model=list[FrontSummary], responses=errors)
    def list_fronts(request: Request, _: str = viewer) -> list[FrontSummary]:
        d = service(request)
        return [_summary(row.id, row.created, Front.model_validate_json(row.doc), row.doc)
                for row in d.store.fronts()]  # fmt: skip

    @r.post("/fronts/{front_id}/picks", response_model=PicksOut,
            responses={**errors, 404: errors[401], 422: errors[401]})  # fmt: skip
    def pick(request: Request, front_id: FrontId, body: PicksIn, user: str = admin) -> PicksOut:
        """Weights from the picked schedules; they become current (docs/calibration.md)."""
        d = service(request)
        front, sha = _front_row(d, front_id)
        try:
            picked = calibrate_picks(front, body.picks)
            doc = picked.weights_file(body.method, sha)
        except CalibrationError as exc:
            way_out = "" if body.method is not None else " (name a method to take its weights)"
            raise HTTPException(422, f"picks refused: {exc}{way_out}") from None
        now = time.time()
        d.store.add_picks(front_id, body.picks, user, now)
        wid = d.store.add_weights(doc.model_dump_json(), user, now)
        return PicksOut(weights=doc, weights_id=wid)

    return r


def _summary(fid: int, created: float, front: Front, text: str) -> FrontSummary:
    return FrontSummary(id=fid, created=created, points=len(front.points),
                        objectives=list(front.search.objectives),
                        sha256=hashlib.sha256(text.encode()).hexdigest())  # fmt: skip
