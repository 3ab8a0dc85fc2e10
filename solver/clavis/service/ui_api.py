"""What the admin's web UI (vismon-ui, issue 16) needs beyond the core API: fronts of the
live cluster started, streamed and cancelled (``front_runs``), a front's schedules, a
calibration preview that stores nothing, the advice file's freshness, and who is logged in.

Roles as everywhere: a viewer reads (and may preview a calibration, which changes
nothing); an admin also starts and cancels runs. Progress is Server-Sent Events on a GET
that takes the same bearer token (the UI reads it with fetch, since EventSource cannot
send a header).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from clavis.calibrate import CalibrationError, calibrate_picks
from clavis.documents import InputError
from clavis.model import CalibrationOutcome, Front
from clavis.pareto import Generation
from clavis.service.auth import token_digest
from clavis.service.calibration_api import _front_row
from clavis.service.edge import service
from clavis.service.front_runs import (
    FrontRun,
    FrontRunner,
    FrontRunSettings,
    NoSuchFrontError,
    RunBusyError,
)

RunId = Annotated[int, Path(ge=1, le=2**62)]
FrontId = Annotated[int, Path(ge=1, le=2**62)]
POLL_S = 0.1  # how often a stream looks for new generations
HEARTBEAT_S = 10.0  # a comment line keeps proxies from closing a quiet stream


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GenerationOut(_Out):
    generation: int
    evaluations: int
    hypervolume: float
    front_size: int


class FrontRunOut(_Out):
    id: int
    user: str
    state: Literal["running", "done", "failed", "cancelled"]
    settings: FrontRunSettings
    started: float
    finished: float | None
    last: GenerationOut | None = Field(description="The newest generation's progress.")
    front_id: int | None = Field(description="The stored front, once done.")
    message: str


class PreviewIn(_Out):
    picks: list[int] = Field(min_length=3, max_length=1000)


class CalibrationPreview(_Out):
    """Both methods' weights for the picks (docs/calibration.md), nothing stored."""

    picks: list[int]
    outcomes: list[CalibrationOutcome]
    recommended: Literal["thesis", "inverse"]
    reason: str
    refusal: str | None = Field(
        description="Why `clavis calibrate` without --method would refuse (a method "
        "failed); the other method's weights can still be made current by naming it."
    )


class AdviceState(_Out):
    state: Literal["fresh", "stale", "missing"]
    generated: str | None
    age_s: float | None
    valid_s: float
    nodes: int


class Me(_Out):
    user: str
    role: Literal["admin", "viewer"]
    expires: float


def _gen(g: Generation) -> GenerationOut:
    return GenerationOut(generation=g.number, evaluations=g.evaluations,
                         hypervolume=g.hypervolume, front_size=g.front_size)  # fmt: skip


def run_out(run: FrontRun) -> FrontRunOut:
    return FrontRunOut(
        id=run.id, user=run.user, state=run.state, settings=run.settings, started=run.started,
        finished=run.finished, last=_gen(run.progress[-1]) if run.progress else None,
        front_id=run.front_id, message=run.message,
    )  # fmt: skip


def _sse(event: str, data: BaseModel) -> bytes:
    return f"event: {event}\ndata: {data.model_dump_json()}\n\n".encode()


async def _stream(request: Request, runner: FrontRunner, run: FrontRun) -> AsyncIterator[bytes]:
    """Every generation so far, then each new one, then ``end`` with the run's final
    state. Ends with the run (which is bounded by its settings) or when the client goes."""
    sent = 0
    quiet_since = time.monotonic()
    while True:
        with runner.changed:
            fresh = run.progress[sent:]
            state = run.state
        for g in fresh:
            yield _sse("progress", _gen(g))
        sent += len(fresh)
        if state != "running":
            yield _sse("end", run_out(run))
            return
        if fresh:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > HEARTBEAT_S:
            yield b": still running\n\n"
            quiet_since = time.monotonic()
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)


def router(admin: Any, viewer: Any, errors: dict[int | str, dict[str, Any]]) -> APIRouter:
    r = APIRouter(prefix="/api/v1")
    err = errors[401]

    def runner_of(request: Request) -> FrontRunner:
        found: FrontRunner = request.app.state.front_runner
        return found

    def run_of(request: Request, run_id: int) -> FrontRun:
        run = runner_of(request).get(run_id)
        if run is None:
            raise HTTPException(404, f"no front run {run_id}")
        return run

    @r.post("/front-runs", status_code=202, response_model=FrontRunOut,
            responses={**errors, 404: err, 409: err, 422: err})  # fmt: skip
    def start_run(request: Request, body: FrontRunSettings, user: str = admin) -> FrontRunOut:
        """Start a front of the live cluster (NSGA-II by default). 409 while one runs, or
        when the cluster's state gives nothing to search (no container reported yet); 422
        for settings out of bounds."""
        try:
            run = runner_of(request).start(body, user, time.time())
        except RunBusyError as exc:
            raise HTTPException(409, str(exc)) from None
        except NoSuchFrontError as exc:
            raise HTTPException(404, str(exc)) from None
        except InputError as exc:
            raise HTTPException(409, f"cannot start a front: {exc}") from None
        return run_out(run)

    @r.get("/front-runs", response_model=list[FrontRunOut], responses=errors)
    def list_runs(request: Request, _: str = viewer) -> list[FrontRunOut]:
        return [run_out(run) for run in runner_of(request).runs()]

    @r.get("/front-runs/{run_id}", response_model=FrontRunOut, responses={**errors, 404: err})
    def get_run(request: Request, run_id: RunId, _: str = viewer) -> FrontRunOut:
        return run_out(run_of(request, run_id))

    @r.post("/front-runs/{run_id}/cancel", response_model=FrontRunOut,
            responses={**errors, 404: err, 409: err})  # fmt: skip
    def cancel_run(request: Request, run_id: RunId, _: str = admin) -> FrontRunOut:
        run_of(request, run_id)
        try:
            return run_out(runner_of(request).cancel(run_id))
        except ValueError as exc:
            raise HTTPException(409, str(exc)) from None

    @r.get(
        "/front-runs/{run_id}/events",
        responses={**errors, 404: err,
                   200: {"content": {"text/event-stream": {"schema": {"type": "string"}}},
                         "description": "progress events, then one end event"}},
    )  # fmt: skip
    def run_events(request: Request, run_id: RunId, _: str = viewer) -> StreamingResponse:
        """Server-Sent Events: ``progress`` (GenerationOut) per generation, then ``end``
        (FrontRunOut)."""
        run = run_of(request, run_id)
        return StreamingResponse(
            _stream(request, runner_of(request), run),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @r.get("/fronts/{front_id}", response_model=Front, responses={**errors, 404: err},
           response_model_by_alias=True)  # fmt: skip
    def get_front(request: Request, front_id: FrontId, _: str = viewer) -> Front:
        return _front_row(request.app.state.clavisd, front_id)[0]

    @r.post("/fronts/{front_id}/calibrate", response_model=CalibrationPreview,
            responses={**errors, 404: err, 422: err})  # fmt: skip
    def preview(request: Request, front_id: FrontId, body: PreviewIn,
                _: str = viewer) -> CalibrationPreview:  # fmt: skip
        """Both methods' weights for the picks, as `clavis calibrate` prints them; stores
        nothing (POST /fronts/{id}/picks makes weights current)."""
        front, _sha = _front_row(request.app.state.clavisd, front_id)
        try:
            picked = calibrate_picks(front, body.picks)
        except CalibrationError as exc:
            raise HTTPException(422, f"picks refused: {exc}") from None
        why, use = picked.refusal(None), picked.recommended
        refusal = None if why is None else \
            f"{why}; make the {use} weights current only by naming that method"  # fmt: skip
        return CalibrationPreview(picks=body.picks, outcomes=list(picked.outcomes),
                                  recommended=picked.recommended,
                                  reason=picked.reason, refusal=refusal)  # fmt: skip

    @r.get("/advice", response_model=AdviceState, responses=errors)
    def advice_state(request: Request, _: str = viewer) -> AdviceState:
        """Whether the advice file select_clavis reads is fresh (within ``valid_s``)."""
        d = service(request)
        cfg = d.config.advice
        try:
            doc = json.loads(cfg.path.read_text())
            generated = str(doc["generated"])
            when = _timestamp(generated)
            nodes = len(doc.get("nodes", []))
        except (OSError, ValueError, KeyError, TypeError):
            return AdviceState(state="missing", generated=None, age_s=None,
                               valid_s=cfg.valid_s, nodes=0)  # fmt: skip
        age = time.time() - when
        state: Literal["fresh", "stale"] = "fresh" if age <= cfg.valid_s else "stale"
        return AdviceState(state=state, generated=generated, age_s=round(age, 3),
                           valid_s=cfg.valid_s, nodes=nodes)  # fmt: skip

    @r.get("/me", response_model=Me, responses=errors)
    def me(request: Request, user: str = viewer) -> Me:
        """The logged-in user, role and session expiry (the UI checks its token here)."""
        d = service(request)
        auth = request.headers.get("authorization", "")
        if not auth.lower().startswith("bearer "):  # a signed request: root on the head
            return Me(user=user, role="admin", expires=0.0)
        found = d.store.session(token_digest(auth[7:].strip()), time.time())
        if found is None:  # ended between the role check and here
            raise HTTPException(401, "unauthenticated: unknown or expired session")
        return Me(user=user, role=found.role, expires=found.expires)

    return r


def _timestamp(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()
