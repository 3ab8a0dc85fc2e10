"""Clavis wire contracts: versioned pydantic models shared by clavisd and the node agents.

Pydantic only: compute hosts import this without the solver's OR-Tools and pymoo. The
JSON Schemas in ``docs/schema/`` are generated from these classes (``python -m
clavis_contracts --write docs/schema``) and a test checks they are current.
"""

from __future__ import annotations

from pydantic import BaseModel

from clavis_contracts.advice import AdviceApp, AdviceFile, AdviceNode
from clavis_contracts.migration import TERMINAL_STATES, MigrationStep, StepState, StepStatus
from clavis_contracts.registration import (
    DeregisterStep,
    RegisterStep,
    RegistrationReply,
    RegistrationRequest,
)
from clavis_contracts.report import ContainerSample, MonitorReport, PeerTraffic, PowerReading

SCHEMAS: dict[str, type[BaseModel]] = {
    "report": MonitorReport,
    "migration-step": MigrationStep,
    "step-status": StepStatus,
    "advice": AdviceFile,
    "registration": RegistrationRequest,
    "registration-reply": RegistrationReply,
}


def json_schemas() -> dict[str, dict[str, object]]:
    return {kind: model.model_json_schema() for kind, model in SCHEMAS.items()}


__all__ = [
    "SCHEMAS",
    "TERMINAL_STATES",
    "AdviceApp",
    "AdviceFile",
    "AdviceNode",
    "ContainerSample",
    "DeregisterStep",
    "MigrationStep",
    "MonitorReport",
    "PeerTraffic",
    "PowerReading",
    "RegisterStep",
    "RegistrationReply",
    "RegistrationRequest",
    "StepState",
    "StepStatus",
    "json_schemas",
]
