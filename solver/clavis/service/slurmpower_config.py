"""``[slurm_power]`` of clavis.toml: how clavisd suspends and resumes the container nodes
for Slurm's power saving (docs/clavisd.md, Slurm power saving)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SlurmPowerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    enabled: bool = Field(default=False, description="Serve /nodes/suspend and /nodes/resume.")
    node_command: list[str] = Field(
        default_factory=list,
        description="The site's command for a node container, an argument list; clavisd "
        "appends `stop NODE` or `start NODE HOST` (the testbed: `clavis-testbed node-power`).",
    )
    command_timeout_s: float = Field(
        default=60.0, gt=0, description="One node command is killed after this long."
    )
    pair_bytes_per_s: float = Field(
        default=1.0e6,
        ge=0,
        description="Bytes/s assumed between every two nodes of a resumed job (those resumed "
        "together and its job_nodes that run; not measured yet), so C keeps them on one host "
        "or rack.",
    )
    switch_wait_s: float = Field(
        default=180.0,
        ge=0,
        description="When no host has room while some are being switched off or on, "
        "choose again each second for at most this long (a host powering off is not a "
        "candidate until it is off).",
    )
    pending_s: float = Field(
        default=120.0,
        gt=0,
        description="A node started on a host counts on it this long before its monitor "
        "lists it, so resumes close together never choose the same free cores.",
    )

    @model_validator(mode="after")
    def _command_given(self) -> SlurmPowerConfig:
        if self.enabled and not self.node_command:
            raise ValueError("enabled without node_command")
        return self
