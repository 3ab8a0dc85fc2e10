"""The migration contract between clavisd and the clavis-migrator agents.

clavisd sends one :class:`MigrationStep` at a time to the agent on the step's source
host (``POST /api/v1/steps``) and asks for its state (``GET /api/v1/steps/{step_id}``);
both answer a :class:`StepStatus`. An agent MUST treat a step id it has seen before as a
status query and never run it twice: that, and clavisd checking where a container runs
before it dispatches, is what lets a restarted clavisd resume a plan without moving any
container twice. A step is reversible until it commits: on any failure the container
keeps running on its source host (state ``rolled_back``).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field, model_validator

from clavis_contracts.common import AwareDatetime, Name, Strict

STEP_VERSION: Final = 1
# Status 2 (issue 14) adds what a move cost: frozen time, bytes moved, pre-copy rounds.
STATUS_VERSION: Final = 2

StepState = Literal[
    "pending",  # planned, not sent
    "dispatched",  # sent; the agent has not confirmed it yet
    "accepted",  # the agent has it and will run it
    "running",
    "done",  # committed: the container runs on the target
    "failed",  # did not happen; the container still runs on the source
    "rolled_back",  # started, undone; the container still runs on the source
]
TERMINAL_STATES: Final = frozenset({"done", "failed", "rolled_back"})


class MigrationStep(Strict):
    schema_version: Literal[1] = STEP_VERSION
    kind: Literal["clavis.migration-step"] = "clavis.migration-step"
    step_id: str = Field(pattern=r"^[0-9]+:[0-9]+$", description="'<plan>:<index>', unique.")
    plan: int = Field(ge=1)
    index: int = Field(ge=0)
    wave: int = Field(ge=0, description="Steps of one wave may run together.")
    container: Name
    source: Name = Field(description="Host the container runs on now.")
    target: Name = Field(description="Host it moves to.")
    target_address: str = Field(
        max_length=256, description="Where the target host's migrator listens (host:port)."
    )
    memory_bytes: int = Field(ge=0)
    cores: int = Field(ge=1)
    deadline_s: float = Field(gt=0, le=86_400, description="Give up and roll back after this.")
    peer_key_id: str | None = Field(
        default=None, max_length=200,
        description="Key id the source signs this step's calls to the target with "
        "('peer:<target key id>:<source>', clavis_contracts.keys).",
    )  # fmt: skip
    peer_key: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$",
        description="This step's peer key, wrapped for the source host's key (hex).",
    )  # fmt: skip

    @model_validator(mode="after")
    def _moves(self) -> MigrationStep:
        if self.source == self.target:
            raise ValueError("source and target are the same host")
        if self.step_id != f"{self.plan}:{self.index}":
            raise ValueError(f"step_id must be '{self.plan}:{self.index}'")
        return self


class StepStatus(Strict):
    schema_version: Literal[1, 2] = STATUS_VERSION
    kind: Literal["clavis.step-status"] = "clavis.step-status"
    step_id: str = Field(pattern=r"^[0-9]+:[0-9]+$")
    state: StepState
    message: str = Field(default="", max_length=4096)
    updated: AwareDatetime
    seconds: float | None = Field(default=None, ge=0, description="Duration once terminal.")
    frozen_s: float | None = Field(
        default=None, ge=0,
        description="Schema 2: how long the container was stopped (dump to verified restore "
        "on the target; for a rollback, until restored on the source). None: it never stopped.",
    )  # fmt: skip
    bytes_moved: int | None = Field(
        default=None, ge=0, description="Schema 2: image bytes sent to the target."
    )
    precopy_rounds: int | None = Field(
        default=None, ge=0, description="Schema 2: iterative pre-copy rounds before the dump."
    )

    @model_validator(mode="after")
    def _versioned(self) -> StepStatus:
        v2 = {"frozen_s", "bytes_moved", "precopy_rounds"} & self.model_fields_set
        if self.schema_version == 1 and v2:
            raise ValueError(f"{', '.join(sorted(v2))} need schema_version 2")
        return self
