"""Routes of host power (hostpower.py): ``POST /api/v1/hosts/{host}/power-on`` for
placement (admin, or signed by root on the head node), ``GET /metrics`` for Prometheus."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel

from clavis.service import slurmpower_api
from clavis.service.edge import service
from clavis.service.hostpower import HostPower

HostName = Annotated[str, Path(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9._-]+$")]


class PowerOnOut(BaseModel):
    host: str
    state: Literal["on", "off", "unknown", "powering-off", "powering-on"]
    reported: bool  # its monitor reported after the power on
    message: str


def _controller(request: Request) -> HostPower | None:
    d = service(request)
    return d.host_power


def router(admin: Any, power: Any, errors: dict[int | str, dict[str, Any]]) -> APIRouter:
    """``power``: the dependency of Slurm's power routes (an admin, or a power key)."""
    r = APIRouter()
    err = errors[401]

    @r.post("/api/v1/hosts/{host}/power-on", response_model=PowerOnOut,
            responses={**errors, 404: err, 409: err})  # fmt: skip
    async def power_on(request: Request, host: HostName, _: Any = admin) -> PowerOnOut:
        """Power the host on through its BMC and wait (at most host_power.on_timeout_s)
        until its monitor reports; 409 when host power is off, 404 for a host without BMC."""
        hp = _controller(request)
        if hp is None:
            raise HTTPException(409, "host power is not enabled ([host_power] enabled)")
        if host not in hp.bmcs:
            raise HTTPException(404, f"no BMC configured for host {host!r}")
        out = await asyncio.to_thread(hp.power_on, host)
        return PowerOnOut(host=out.host, state=out.state, reported=out.reported,
                          message=out.message)  # fmt: skip

    @r.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> PlainTextResponse:
        hp = _controller(request)
        text = hp.metrics_text() if hp is not None else ""
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    # Slurm's power saving: nodes suspended and resumed onto hosts host power keeps on
    r.include_router(slurmpower_api.router(power, errors))
    return r
