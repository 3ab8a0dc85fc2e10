"""Routes of Slurm's power saving (slurmpower.py): ``POST /api/v1/nodes/suspend`` and
``POST /api/v1/nodes/resume``, for Slurm's SuspendProgram and ResumeProgram (an admin,
or signed with a power key, or an admin key: slurm-plugin/power/).

A resume request has a schema version: 1 lists the nodes to start; 2 adds ``job_nodes``,
the job's nodes that are up already, which the new nodes are placed near. The resume
program builds the same request with the same rules (slurm-plugin/power/).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Annotated, Any, Final, Literal

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from clavis.service.edge import service
from clavis.service.slurmpower import NodeAsk, SlurmPower

NodeName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9._-]+$")]
RESUME_VERSION: Final = 2
MAX_NODES: Final = 4096


class SuspendIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    nodes: list[NodeName] = Field(min_length=1, max_length=MAX_NODES)


class ResumeNode(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: NodeName
    cores: int = Field(ge=1, le=65536)
    memory_bytes: int = Field(ge=0, le=2**50)


class ResumeIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    schema_version: Literal[1, 2] = Field(
        default=1, description="1: nodes only; 2: also job_nodes (RESUME_VERSION)."
    )
    nodes: list[ResumeNode] = Field(min_length=1, max_length=MAX_NODES)
    job_nodes: list[NodeName] = Field(
        default_factory=list,
        max_length=MAX_NODES,
        description="Schema version 2: the job's allocated nodes that are not being resumed "
        "(SLURM_RESUME_FILE's nodes_alloc less nodes_resume), which are up; the evaluator "
        "counts them as members of the job, so the new nodes go near them.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ResumeIn:
        if self.schema_version == 1 and "job_nodes" in self.model_fields_set:
            raise ValueError("job_nodes needs schema_version 2")
        names = [n.name for n in self.nodes]
        for field, listed in (("nodes", names), ("job_nodes", self.job_nodes)):
            twice = sorted(n for n, k in Counter(listed).items() if k > 1)
            if twice:
                raise ValueError(f"{field} lists {', '.join(twice[:5])} more than once")
        both = sorted(set(names) & set(self.job_nodes))
        if both:
            raise ValueError(f"job_nodes {', '.join(both[:5])} are being resumed (in nodes): "
                             "a job's running nodes are the ones not resumed")  # fmt: skip
        return self


class NodeOut(BaseModel):
    node: str
    host: str | None  # where it was started (resume); None for a suspend or no choice
    ok: bool
    message: str


class NodesOut(BaseModel):
    results: list[NodeOut]


def _service(request: Request) -> SlurmPower:
    """The clavisd's SlurmPower, made on first use; 409 when it is not enabled."""
    d = service(request)
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
        """Start the nodes' containers on hosts chosen by the evaluator, near the job's
        nodes that run (job_nodes), powering hosts on as needed (Slurm's ResumeProgram);
        each node's host and result."""
        sp = _service(request)
        asks = [NodeAsk(n.name, n.cores, n.memory_bytes) for n in body.nodes]
        return _out(await asyncio.to_thread(sp.resume, asks, body.job_nodes))

    return r
