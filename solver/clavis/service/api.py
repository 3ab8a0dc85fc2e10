"""The REST API (/api/v1): ingest for agents, read-only views, admin actions.

Every error is a JSON ``{"detail": ...}`` with a 4xx status that says what was wrong;
an unauthenticated request learns nothing but that it is unauthenticated.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from clavis.documents import describe
from clavis.model import Front, WeightsFile
from clavis.objectives import Weights
from clavis.service import (
    calibration_api,
    history_api,
    hostpower_api,
    replay,
    reports,
    ui_api,
    ui_static,
)
from clavis.service import schemas as s
from clavis.service.auth import (
    AuthError,
    Role,
    check_password,
    credential,
    session_role,
    token_digest,
)
from clavis.service.classify import effective
from clavis.service.edge import Service, service
from clavis.service.front_runs import FrontRunner
from clavis.service.limits import BodyLimits, BoundedBodies, LoginLimiter
from clavis_contracts import MonitorReport
from clavis_contracts.signing import SIGNATURE

API = "/api/v1"
_ERR = {"model": s.ErrorBody}
_AUTH_ERRORS: dict[int | str, dict[str, Any]] = {401: _ERR, 403: _ERR}


# Signed requests by key role: admin keys reach every endpoint a person's role does;
# power keys (Slurm's power programs) only the ones that name them; agent keys only
# /reports (reports.py), never a route of this module.
ADMIN_KEYS: Final = frozenset({"admin"})
POWER_KEYS: Final = frozenset({"admin", "power"})
_KEY_KIND: Final = {"agent": "a host's agent key", "power": "a power key (Slurm's power "
                    "programs: /nodes/suspend and /nodes/resume only)"}  # fmt: skip


async def _signed_by(request: Request, body: bytes, key_roles: frozenset[str]) -> str:
    """A request signed with a key of one of ``key_roles``; any other key gets 403 here."""
    d = service(request)
    try:
        got = d.auth.check(request.method, request.url.path, body, dict(request.headers),
                           time.time())  # fmt: skip
    except AuthError as exc:
        raise HTTPException(401, f"unauthenticated: {exc}") from None
    if got.key.role not in key_roles:
        kind = _KEY_KIND.get(got.key.role, f"a {got.key.role} key")
        raise HTTPException(403, f"forbidden: {got.key.id} is {kind}, not an admin key")
    return f"key {got.key.id}"


def require(role: Role, key_roles: frozenset[str] = ADMIN_KEYS) -> Any:
    """A dependency: a logged-in user with ``role`` (admin also passes viewer checks), or a
    request signed with a key of ``key_roles`` (admin: root on the head node, e.g. `clavis
    repack`)."""

    async def dep(request: Request) -> str:
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            d = service(request)
            found = d.store.session(token_digest(auth[7:].strip()), time.time())
            if found is None:
                raise HTTPException(401, "unauthenticated: unknown or expired session")
            have = session_role(d.config.users, found)
            if have is None:
                raise HTTPException(
                    401, "unauthenticated: session revoked (user removed, or role or "
                    "password changed); log in again",
                )  # fmt: skip
            if role == "admin" and have != "admin":
                raise HTTPException(403, f"forbidden: {role} role required")
            return found.user
        if SIGNATURE.lower() in {k.lower() for k in request.headers}:
            return await _signed_by(request, await request.body(), key_roles)
        raise HTTPException(401, "unauthenticated: log in or sign the request")

    return Depends(dep)


PlanId = Annotated[int, Path(ge=1, le=2**62)]
Viewer = Annotated[str, require("viewer")]
Admin = Annotated[str, require("admin")]
router = APIRouter(prefix=API)


@router.get("/health", response_model=s.Health)
def health(request: Request) -> s.Health:
    d = service(request)
    return s.Health(
        status="ok", schema_versions=d.schema_versions, reports_stored=d.ingestor.stored
    )


def _raw_body(model: str) -> dict[str, Any]:
    """OpenAPI for a body read raw (signatures cover exact bytes); see create_app."""
    ref = {"$ref": f"#/components/schemas/{model}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


_REPORT_ERRORS: dict[int | str, dict[str, Any]] = {
    401: _ERR, 409: _ERR, 413: _ERR, 422: _ERR, 503: _ERR,
}  # fmt: skip


@router.post(
    "/reports",
    status_code=202,
    response_model=s.ReportAccepted,
    responses=_REPORT_ERRORS,
    openapi_extra=_raw_body("MonitorReport"),
)
async def post_report(request: Request) -> Response:
    """A monitor's report (signed). 413 oversize, 401 unauthenticated, 422 malformed,
    unknown host, stale or from the future, 409 not newer than the host's last report.
    Served by reports.ReportFastPath in clavisd; this route documents it and serves it
    when the app runs without that layer."""
    d = service(request)
    body = await reports.read_body(request.receive, d.config.ingest.max_report_bytes)
    if body is None:
        raise HTTPException(
            413, f"report exceeds the limit of {d.config.ingest.max_report_bytes} bytes"
        )
    answer = await reports.accept(d, dict(request.headers), body)
    return JSONResponse(answer.body, status_code=answer.status)


@router.post("/login", response_model=s.LoginOut, responses={401: _ERR, 413: _ERR, 429: _ERR})
def login(request: Request, body: s.LoginIn) -> s.LoginOut:
    d = service(request)
    limiter: LoginLimiter = request.app.state.login_limiter
    now = time.time()
    # Failures count per client address and per user name (docs/clavisd.md, Security).
    who = (f"address {request.client.host if request.client else '?'}", f"user {body.user}")
    wait = limiter.retry_after(who, now)
    if wait:
        raise HTTPException(
            429, f"too many failed logins; retry in {wait} s", headers={"Retry-After": str(wait)}
        )
    user = next((u for u in d.config.users if u.name == body.user), None)
    # Check a password even for an unknown user, so timing does not reveal who exists.
    stored = user.password_scrypt if user else d.dummy_hash
    if not check_password(body.password, stored) or user is None:
        limiter.failed(who, now)
        raise HTTPException(401, "unauthenticated: wrong user or password")
    token = secrets.token_urlsafe(32)
    expires = time.time() + d.config.security.session_ttl_s
    cred = credential(user.name, user.role, user.password_scrypt)
    d.store.add_session(token_digest(token), user.name, user.role, expires, cred)
    return s.LoginOut(token=token, role=user.role, expires=expires)


@router.post("/logout", status_code=204, responses={401: _ERR})
def logout(request: Request) -> Response:
    """End the session whose bearer token this request carries (204); the token is
    refused from then on."""
    auth = request.headers.get("authorization", "")
    if not auth.lower().startswith("bearer ") or not service(request).store.drop_session(
        token_digest(auth[7:].strip())
    ):
        raise HTTPException(401, "unauthenticated: no such session")
    return Response(status_code=204)


@router.get("/hosts", response_model=list[s.HostOut], responses=_AUTH_ERRORS)
def hosts(request: Request, _: Viewer) -> list[s.HostOut]:
    return [s.HostOut(**asdict(h)) for h in service(request).store.hosts()]


@router.get("/containers", response_model=list[s.ContainerOut], responses=_AUTH_ERRORS)
def containers(request: Request, _: Viewer) -> list[s.ContainerOut]:
    d = service(request)
    out = []
    for c in d.store.containers():
        shown, source = effective(c.klass, c.class_source, c.class_hint, c.intensity_mpki,
                                  d.thresholds.of(c.host))  # fmt: skip
        out.append(s.ContainerOut(**asdict(c), effective_class=shown, effective_source=source))
    return out


@router.get("/jobs", response_model=list[s.JobOut], responses=_AUTH_ERRORS)
def jobs(request: Request, _: Viewer) -> list[s.JobOut]:
    return [s.JobOut(**asdict(j)) for j in service(request).store.jobs()]


@router.get("/power-models", response_model=list[s.PowerModelOut], responses=_AUTH_ERRORS)
def power_models(request: Request, _: Viewer) -> list[s.PowerModelOut]:
    return [s.PowerModelOut(**asdict(m)) for m in service(request).store.power_models().values()]


@router.post("/power-models/fit", response_model=s.PowerFitOut, responses=_AUTH_ERRORS)
def fit_power_models(request: Request, _: Admin) -> s.PowerFitOut:
    fitted, refused = service(request).fit_power_models(time.time())
    return s.PowerFitOut(fitted=[s.PowerModelOut(**asdict(m)) for m in fitted], refused=refused)


@router.get("/weights", response_model=s.WeightsOut, responses=_AUTH_ERRORS)
def weights(request: Request, _: Viewer) -> s.WeightsOut:
    w, source = service(request).weights()
    return s.WeightsOut(P=w.P, D=w.D, C=w.C, M=w.M, source=source)


@router.post(
    "/weights",
    response_model=s.WeightsOut,
    responses={**_AUTH_ERRORS, 422: _ERR},
    openapi_extra=_raw_body("WeightsFile"),
)
async def set_weights(request: Request, user: Admin) -> s.WeightsOut:
    """Make a weights file of `clavis calibrate` (docs/schema/weights.schema.json) current."""
    body = await request.body()
    try:
        doc = WeightsFile.model_validate_json(body, strict=True)
    except ValidationError as exc:
        raise HTTPException(422, f"malformed weights file: {describe(exc, None)}") from None
    given = doc.weights
    try:  # what F takes (the model refuses negative and all-zero weights too)
        Weights(given.P, given.D, given.C, given.M)
    except ValueError as exc:
        raise HTTPException(422, f"weights file: {exc}") from None
    d = service(request)
    d.store.add_weights(doc.model_dump_json(), user, time.time())
    w, source = d.weights()
    return s.WeightsOut(P=w.P, D=w.D, C=w.C, M=w.M, source=source)


def plan_out(d: Service, plan_id: int) -> s.PlanOut:
    p = d.store.plan(plan_id)
    if p is None:
        raise HTTPException(404, f"no plan {plan_id}")
    return s.plan_out(p, d.store.steps(plan_id))


@router.get("/plans", response_model=list[s.PlanOut], responses=_AUTH_ERRORS)
def plans(request: Request, _: Viewer) -> list[s.PlanOut]:
    d = service(request)
    return [plan_out(d, p.id) for p in d.store.plans()]


@router.get("/plans/{plan_id}", response_model=s.PlanOut, responses={**_AUTH_ERRORS, 404: _ERR})
def plan(request: Request, plan_id: PlanId, _: Viewer) -> s.PlanOut:
    return plan_out(service(request), plan_id)


# Decision replay (docs/clavisd.md). The record's schema: docs/schema/replay.schema.json.
@router.get("/plans/{plan_id}/replay", responses={**_AUTH_ERRORS, 404: _ERR, 409: _ERR})
def plan_replay(request: Request, plan_id: PlanId, _: Viewer) -> Response:
    """The plan's replay record (replay.py) exactly as stored, validated before it is sent;
    404 for no such plan, or a plan stored before decision replay (store migration 6)."""
    d = service(request)
    if d.store.plan(plan_id) is None:
        raise HTTPException(404, f"no plan {plan_id}")
    doc = d.store.plan_replay(plan_id)
    if doc is None:
        raise HTTPException(
            404, f"plan {plan_id} has no replay record: it was stored before decision "
            "replay (store migration 6) recorded a plan's inputs",
        )  # fmt: skip
    try:
        replay.decode(doc, f"plan {plan_id}'s stored replay record")
    except replay.ReplayError as exc:
        raise HTTPException(409, str(exc)) from None
    return Response(doc, media_type="application/json")


@router.post("/repack", response_model=s.RepackOut, responses={**_AUTH_ERRORS, 422: _ERR})
async def repack(request: Request, body: s.RepackIn, _: Admin) -> s.RepackOut:
    """Snapshot, solve and plan; with ``apply``, start the plan (thesis §5.5.3 loop)."""
    d = service(request)
    return await asyncio.to_thread(d.repack_once, body.apply)


@router.post("/plans/{plan_id}/apply", response_model=s.PlanOut,
             responses={**_AUTH_ERRORS, 404: _ERR, 409: _ERR})  # fmt: skip
async def apply_plan(request: Request, plan_id: PlanId, _: Admin) -> s.PlanOut:
    d = service(request)
    plan_out(d, plan_id)
    try:
        await asyncio.to_thread(d.start_plan, plan_id)
    except ValueError as exc:
        raise HTTPException(409, str(exc)) from None
    return plan_out(d, plan_id)


async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """422 naming each bad field and what is wrong with it, never the value sent: it may be
    a password, and NaN or infinity (which JSON cannot carry back) would turn the answer
    into a 500. FastAPI's own answer echoes every input."""
    assert isinstance(exc, RequestValidationError)
    where = []
    for e in exc.errors()[:10]:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        where.append(f"{loc[:200]}: {str(e.get('msg', 'invalid'))[:200]}")
    return JSONResponse({"detail": "malformed request: " + "; ".join(where)}, status_code=422)


def create_app(d: Service) -> FastAPI:
    runner = FrontRunner(d.store, d.snapshot)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(runner.stop)  # a run in progress ends before the store does

    app = FastAPI(title="clavisd", version="1", openapi_url=f"{API}/openapi.json",
                  docs_url=None, redoc_url=None, lifespan=lifespan)  # fmt: skip
    app.state.clavisd = d
    sec = d.config.security
    app.state.login_limiter = LoginLimiter(sec.login_max_failures, sec.login_window_s)
    app.state.front_runner = runner
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.include_router(router)
    app.include_router(calibration_api.router(require("admin"), require("viewer"), _AUTH_ERRORS))
    app.include_router(ui_api.router(require("admin"), require("viewer"), _AUTH_ERRORS))
    app.include_router(history_api.router(require("viewer"), _AUTH_ERRORS))
    app.include_router(hostpower_api.router(require("admin"), require("admin", POWER_KEYS),
                                            _AUTH_ERRORS))  # fmt: skip
    ui_static.mount(app, d.config.server.ui_dir)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
        # The report body is read raw (its signature covers the exact bytes), so its
        # schema is added here from the contract rather than inferred from a parameter.
        comps = doc.setdefault("components", {}).setdefault("schemas", {})
        for model in (MonitorReport, WeightsFile, Front):
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            comps.update(body.pop("$defs", {}))
            comps[model.__name__] = body
        # F takes only non-negative weights with one positive (objectives.Weights); the
        # weights document allows more, so the API states what it accepts.
        comps["WeightsFile"]["properties"]["weights"] = {
            "allOf": [
                {"$ref": "#/components/schemas/ObjectiveValues"},
                {"properties": {k: {"minimum": 0} for k in "PDCM"}},
                {"anyOf": [{"properties": {k: {"exclusiveMinimum": 0}}} for k in "PDCM"]},
            ]
        }
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def serve(d: Service) -> BoundedBodies:
    """What clavisd serves: the API behind the report fast path, behind the bounds on
    every request's body (limits.py)."""
    srv, ing = d.config.server, d.config.ingest
    bounds = BodyLimits(
        report_bytes=ing.max_report_bytes,
        login_bytes=srv.login_max_bytes,
        other_bytes=srv.max_body_bytes,
        timeout_s=srv.request_timeout_s,
    )
    return BoundedBodies(reports.ReportFastPath(create_app(d), d), bounds)
