"""``[host_power]`` of clavis.toml: which hosts clavisd may power off and on through their
BMCs, and the dwell times that keep it from flapping (docs/clavisd.md, Host power)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class HostPowerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    enabled: bool = Field(default=False, description="Power hosts off and on; off: never.")
    interval_s: float = Field(
        default=30.0, gt=0, description="How often each BMC is asked the power state."
    )
    grace_s: float = Field(
        default=600.0, ge=0, description="A host without containers this long is powered off."
    )
    min_on_s: float = Field(
        default=1800.0,
        ge=0,
        description="A host stays on at least this long after it was powered on (hysteresis).",
    )
    min_off_s: float = Field(
        default=60.0,
        ge=0,
        description="A host stays off at least this long before a power on is sent "
        "(hysteresis; power supplies dislike fast cycling).",
    )
    soft_timeout_s: float = Field(
        default=120.0, ge=0, description="After `chassis power soft`, wait this long, then `off`."
    )
    on_timeout_s: float = Field(
        default=300.0, gt=0, description="After `chassis power on`, wait this long for a report."
    )
    stay_on: list[str] = Field(
        default_factory=list, description="Hosts never powered off (head, storage, spares)."
    )
    bmcs: dict[str, str] = Field(
        default_factory=dict,
        description='host = "address:port" (RMCP+ port, usually 623) of each host\'s BMC; '
        "hosts without an entry are never powered off.",
    )
    bmc_user: str = Field(default="admin", min_length=1, description="BMC user (ipmitool -U).")
    bmc_password_file: Path = Field(
        default=Path("/etc/clavis/bmc-password"),
        description="BMC password (ipmitool -f): owner-only mode (0600), owned by root "
        "when root reads it; read by ipmitool, never logged.",
    )
    ipmitool: list[str] = Field(
        default_factory=lambda: ["ipmitool"],
        min_length=1,
        description="ipmitool command, argument list (a site may prefix it, e.g. nsenter).",
    )
    cipher_suite: int = Field(default=3, ge=0, le=17, description="ipmitool -C.")
    command_timeout_s: float = Field(
        default=10.0, gt=0, description="One ipmitool call is killed after this long."
    )

    @field_validator("bmcs")
    @classmethod
    def _address_port(cls, v: dict[str, str]) -> dict[str, str]:
        for host, addr in v.items():
            a, colon, port = addr.rpartition(":")
            if not (colon and a and port.isdigit() and 1 <= int(port) <= 65535):
                raise ValueError(f"host {host!r}: {addr!r} is not address:port (port 1-65535)")
        return v

    @model_validator(mode="after")
    def _timeouts_fit(self) -> HostPowerConfig:
        if self.enabled and not self.bmcs:
            raise ValueError("enabled without any [host_power.bmcs] entry")
        return self
