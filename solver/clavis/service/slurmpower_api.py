"""Routes of Slurm's power saving (slurmpower.py): ``POST /api/v1/nodes/suspend`` and
``POST /api/v1/nodes/resume``, for Slurm's SuspendProgram and ResumeProgram (admin, or
signed with an admin key: slurm-plugin/power/)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from clavis.service.slurmpower import NodeAsk, SlurmPower

if TYPE_CHECKING:
    from clavis.service.daemon import Clavisd

NodeName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9._-]+$")]


class SuspendIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    nodes: list[NodeName] = Field(min_length=1, max_length=4096)


class ResumeNode(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: NodeName
    cores: int = Field(ge=1, le=65536)
    memory_bytes: int = Field(ge=0, le=2**50)


class ResumeIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    nodes: list[ResumeNode] = Field(min_length=1, max_length=4096)


class NodeOut(BaseModel):
    node: str
    host: str | None  # where it was started (resume); None for a suspend or no choice
    ok: bool
    message: str


class NodesOut(BaseModel):
    results: list[NodeOut]


def _service(request: Request) -> SlurmPower:
    """The clavisd's SlurmPower, made on first use; 409 when it is not enabled."""
    d: Clavisd = request.app.state.clavisd
    cfg = d.config.slurm_power
    if not cfg.enabled:
        raise HTTPException(409, "Slurm power saving is not enabled ([slurm_power] enabled)")
    sp: SlurmPower | None = getattr(request.app.state, "slurm_power", None)
    if sp is None:
        sp = SlurmPower(cfg, snapshot=d.snapshot, weights=lambda: d.weights()[0],
                        host_power=d.host_power)  # fmt: skip
        request.app.state.slurm_power = sp
    return sp


def _out(results: list[Any]) -> NodesOut:
    return NodesOut(results=[NodeOut(node=r.node, host=r.host, ok=r.ok, message=r.message)
                             for r in results])  # fmt: skip


def router(admin: Any, errors: dict[int | str, dict[str, Any]]) -> APIRouter:
    r = APIRouter()
    err = errors[401]

    @r.post("/api/v1/nodes/suspend", response_model=NodesOut, responses={**errors, 409: err})
    async def suspend(request: Request, body: SuspendIn, _: Any = admin) -> NodesOut:
        """Stop the nodes' containers (Slurm's SuspendProgram); each node's result."""
        sp = _service(request)
        return _out(await asyncio.to_thread(sp.suspend, body.nodes))

    @r.post("/api/v1/nodes/resume", response_model=NodesOut, responses={**errors, 409: err})
    async def resume(request: Request, body: ResumeIn, _: Any = admin) -> NodesOut:
        """Start the nodes' containers on hosts chosen by the evaluator, powering hosts on
        as needed (Slurm's ResumeProgram); each node's host and result."""
        sp = _service(request)
        asks = [NodeAsk(n.name, n.cores, n.memory_bytes) for n in body.nodes]
        return _out(await asyncio.to_thread(sp.resume, asks))

    return r
