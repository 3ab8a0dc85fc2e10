"""Fronts, picks and weights over the API: the admin's calibration (thesis §5.5.1) through
clavisd, with every front and pick kept in the store for audit (docs/calibration.md)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from fastapi import APIRouter, HTTPException, Path, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import insert, select

from clavis.calibrate import CalibrationError, Outcome, calibrate
from clavis.documents import describe
from clavis.model import CalibrationOutcome, Front, ObjectiveValues, WeightsFile
from clavis.service import tables as t
from clavis.service.snapshot import cluster_mismatch

if TYPE_CHECKING:
    from clavis.service.daemon import Clavisd

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


def _front_row(d: Clavisd, front_id: int) -> tuple[Front, str]:
    with d.store.engine.connect() as conn:
        doc = conn.execute(select(t.fronts.c.doc).where(t.fronts.c.id == front_id)).scalar()
    if doc is None:
        raise HTTPException(404, f"no front {front_id}")
    return Front.model_validate_json(doc), hashlib.sha256(doc.encode()).hexdigest()


def _outcome(
    name: Literal["thesis", "inverse"], o: Outcome | str, names: Sequence[str]
) -> CalibrationOutcome:
    if isinstance(o, str):
        return CalibrationOutcome(method=name, error=o)
    full = dict.fromkeys("PDCM", 0.0) | dict(zip(names, o.weights, strict=True))
    return CalibrationOutcome(method=name, weights=ObjectiveValues(**full), residual=o.residual,
                              regret=o.regret)  # fmt: skip


def weights_from_picks(front: Front, sha256: str, picks: list[int],
                       method: Literal["thesis", "inverse"] | None) -> WeightsFile:  # fmt: skip
    """The same document `clavis calibrate` writes; CalibrationError when refused."""
    by_id = {p.id: p for p in front.points}
    unknown = [p for p in picks if p not in by_id]
    if unknown:
        raise CalibrationError(f"no schedule with id {unknown[0]} in the front")
    if len(set(picks)) != len(picks):
        raise CalibrationError("a schedule is picked twice")
    names = list(front.search.objectives)
    matrix = np.array([[getattr(p.normalised, n) for n in names] for p in front.points])
    chosen = np.array([[getattr(by_id[k].normalised, n) for n in names] for k in picks])
    results, recommended, reason = calibrate(chosen, matrix)
    use: Literal["thesis", "inverse"] = method or recommended  # type: ignore[assignment]
    outcomes = [_outcome("thesis", results["thesis"], names),
                _outcome("inverse", results["inverse"], names)]  # fmt: skip
    mine = next(o for o in outcomes if o.method == use)
    if mine.weights is None:
        raise CalibrationError(f"method {use}: {mine.error}")
    return WeightsFile(
        weights=mine.weights,
        method=use,
        recommended=recommended,
        reason=reason,
        picks=picks,
        front_sha256=sha256,
        outcomes=outcomes,
    )


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
        d: Clavisd = request.app.state.clavisd
        other = cluster_mismatch(front.cluster, d.cluster)
        if other is not None:
            raise HTTPException(422, f"front is for another cluster: {other}")
        text = body.decode()
        with d.store.engine.begin() as conn:
            res = conn.execute(insert(t.fronts).values(created=time.time(), doc=text))
            fid = int(res.inserted_primary_key[0])  # type: ignore[index]
        return _summary(fid, time.time(), front, text)

    @r.get("/fronts", response_model=list[FrontSummary], responses=errors)
    def list_fronts(request: Request, _: str = viewer) -> list[FrontSummary]:
        d: Clavisd = request.app.state.clavisd
        with d.store.engine.connect() as conn:
            rows = conn.execute(select(t.fronts).order_by(t.fronts.c.id)).all()
        return [_summary(row.id, row.created, Front.model_validate_json(row.doc), row.doc)
                for row in rows]  # fmt: skip

    @r.post("/fronts/{front_id}/picks", response_model=PicksOut,
            responses={**errors, 404: errors[401], 422: errors[401]})  # fmt: skip
    def pick(request: Request, front_id: FrontId, body: PicksIn, user: str = admin) -> PicksOut:
        """Weights from the picked schedules; they become current (docs/calibration.md)."""
        d: Clavisd = request.app.state.clavisd
        front, sha = _front_row(d, front_id)
        try:
            doc = weights_from_picks(front, sha, body.picks, body.method)
        except CalibrationError as exc:
            raise HTTPException(422, f"picks refused: {exc}") from None
        now = time.time()
        with d.store.engine.begin() as conn:
            conn.execute(insert(t.picks).values(front_id=front_id, points=str(body.picks),
                                                user=user, created=now))  # fmt: skip
        wid = d.store.add_weights(doc.model_dump_json(), user, now)
        return PicksOut(weights=doc, weights_id=wid)

    return r


def _summary(fid: int, created: float, front: Front, text: str) -> FrontSummary:
    return FrontSummary(id=fid, created=created, points=len(front.points),
                        objectives=list(front.search.objectives),
                        sha256=hashlib.sha256(text.encode()).hexdigest())  # fmt: skip
