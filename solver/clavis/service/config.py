"""clavisd configuration: ``/etc/clavis/clavis.toml`` (path overridable), every option
with a default; ``docs/clavisd.md`` lists them. Unknown keys are errors, and every
problem is reported at once at load time."""

from __future__ import annotations

import grp
import re
import tomllib
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from clavis.documents import InputError, decode, describe
from clavis.service.hostpower_config import HostPowerConfig
from clavis.service.slurmpower_config import SlurmPowerConfig
from clavis_contracts.advice import MAX_VALID_S

DEFAULT_PATH: Final = Path("/etc/clavis/clavis.toml")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ServerConfig(_Section):
    listen: str = Field(default="127.0.0.1", description="Address the API listens on.")
    port: int = Field(default=7780, ge=1, le=65535, description="TCP port of the API.")
    tls_cert_file: Path | None = Field(
        default=None,
        description="PEM certificate (chain) to serve HTTPS with; with tls_key_file. "
        "None: plain HTTP (keep listen on loopback then).",
    )
    tls_key_file: Path | None = Field(
        default=None, description="PEM private key of tls_cert_file: mode 0600, root's."
    )
    max_body_bytes: int = Field(
        default=8 * 2**20, ge=1024, description="Larger request bodies get 413 (reports: "
        "ingest.max_report_bytes; /login: login_max_bytes)."
    )  # fmt: skip
    login_max_bytes: int = Field(
        default=4096, ge=256, le=65536, description="Larger /login bodies get 413."
    )
    request_timeout_s: float = Field(
        default=10.0, gt=0, le=600, description="A body not received within this gets 408."
    )
    header_timeout_s: float = Field(
        default=10.0, gt=0, le=600,
        description="A connection whose request headers are not complete within this is closed.",
    )  # fmt: skip

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerConfig:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together: set both or neither")
        return self

    @property
    def scheme(self) -> str:
        return "http" if self.tls_cert_file is None else "https"

    ui_dir: Path | None = Field(
        default=None,
        description="Built admin UI (vismon-ui/dist, docs/ui.md) served at /ui/; unset: none.",
    )

    @field_validator("ui_dir")
    @classmethod
    def _has_index(cls, v: Path | None) -> Path | None:
        if v is not None and not (v / "index.html").is_file():
            raise ValueError(f"{v} has no index.html (build it: make -C vismon-ui build)")
        return v


class StoreConfig(_Section):
    url: str = Field(
        default="sqlite:////var/lib/clavis/clavis.db",
        description="SQLAlchemy URL of the store; postgresql://… for PostgreSQL.",
    )


class SecurityConfig(_Section):
    agent_keys_file: Path = Field(
        default=Path("/etc/clavis/agent-keys.toml"),
        description="Every host's agent keys and the admin keys (clavis_contracts.keys): "
        "mode 0600, owned by root when root reads it; re-read when it changes.",
    )
    max_skew_s: float = Field(
        default=30.0, gt=0, le=3600, description="Signed requests further off are refused."
    )
    session_ttl_s: float = Field(default=8 * 3600.0, gt=0, description="UI login lifetime.")
    login_max_failures: int = Field(
        default=5, ge=1, le=1000,
        description="Failed logins per client address, and per user name, within "
        "login_window_s; past them /login gets 429 with Retry-After.",
    )  # fmt: skip
    login_window_s: float = Field(
        default=60.0, gt=0, le=86400, description="Window of login_max_failures."
    )


class User(_Section):
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")]
    role: Literal["admin", "viewer"]
    password_scrypt: str = Field(description="Output of `clavis hash-password`.")


class IngestConfig(_Section):
    max_report_bytes: int = Field(
        default=256 * 1024, ge=1024, description="Larger reports get 413."
    )
    max_report_age_s: float = Field(
        default=120.0,
        gt=0,
        description="Hosts whose newest report is older count as draining (repack, advice).",
    )
    max_backlog_s: float = Field(
        default=86400.0,
        gt=0,
        description="Older reports get 422. Reports a monitor spooled through an outage "
        "are stored up to this age: keep it at least the monitors' spool reach "
        "(spool.max_reports x interval_s, 20000 s by default; docs/monitor.md).",
    )
    max_future_s: float = Field(
        default=30.0, ge=0, description="Reports stamped further ahead get 422."
    )
    writer: Literal["process", "thread"] = Field(
        default="process",
        description="Write reports from a child process (uses a second core) or a thread.",
    )
    batch_max: int = Field(default=500, ge=1, description="Reports per store transaction.")
    batch_wait_ms: float = Field(default=20.0, ge=0, description="How long a batch waits to fill.")

    @model_validator(mode="after")
    def _backlog_covers_freshness(self) -> IngestConfig:
        if self.max_backlog_s < self.max_report_age_s:
            raise ValueError(f"max_backlog_s ({self.max_backlog_s:g}) must not be below "
                             f"max_report_age_s ({self.max_report_age_s:g})")  # fmt: skip
        return self


class RetentionConfig(_Section):
    raw_s: float = Field(default=3600.0, gt=0, description="Keep samples at full resolution.")
    keep_s: float = Field(default=7 * 86400.0, gt=0, description="Drop samples older than this.")
    bucket_s: float = Field(default=60.0, gt=0, description="Downsampled resolution.")


class ClassifyConfig(_Section):
    devil_threshold_mpki: float = Field(
        default=4.5, gt=0, description="Devil at or above this intensity (thesis §5.4)."
    )
    host_thresholds: dict[str, float] = Field(
        default_factory=dict, description="Host name prefix -> threshold (per host model)."
    )
    window: int = Field(default=10, ge=1, le=1000, description="Hysteresis window, samples.")
    votes: int = Field(
        default=7, ge=1, le=1000, description="Votes of the window to change class (DINO)."
    )


class RepackConfig(_Section):
    interval_s: float = Field(default=60.0, ge=0, description="Internal loop; 0 = off.")
    margin: float = Field(
        default=0.02, ge=0, le=1, description="Plan only if F improves by more than this."
    )
    method: str = Field(default="cpsat", description="Placement method (`clavis solve`).")
    time_limit_s: float = Field(default=60.0, gt=0, description="Solver time per pass.")
    workers: int = Field(
        default=2,
        ge=0,
        description="Solver threads; 0 = all cores. From 2, a repack's pool bound runs in a "
        "process of its own beside the search (docs/objectives.md).",
    )
    seed: int = Field(default=0, description="Solver random seed (`clavis solve --seed`).")
    deterministic: bool = Field(
        default=False,
        description="Plan with CP-SAT alone on one worker and time_limit_s as its "
        "deterministic time, so `clavis solve --replay` gives the same placement; off: the "
        "solver's search turns on the wall clock (better plans, a replay compares F within "
        "a tolerance; docs/clavisd.md, Decision replay).",
    )
    parallelism: int = Field(default=2, ge=1, description="Migrations at once (per wave).")
    step_deadline_s: float = Field(
        default=600.0, gt=0, description="An agent rolls a step back after this."
    )
    poll_s: float = Field(default=1.0, gt=0, description="How often running steps are polled.")
    power_cycle_s: float = Field(
        default=120.0,
        ge=0,
        description="A host's shutdown and boot, at about idle watts: each host a plan "
        "empties costs idle_w x this / power_horizon_s watts of P beyond the margin "
        "(powercycle.py); 0: not counted.",
    )
    power_horizon_s: float = Field(
        default=3600.0,
        gt=0,
        description="How long a placement is expected to hold: a power cycle's energy is "
        "spread over it.",
    )
    default_weights: tuple[float, float, float, float] = Field(
        default=(0.15, 1.94, 0.68, 0.5),
        description="P, D, C, M weights until a calibrated weights file is posted "
        "(thesis §5.5.1 Parapluie weights, plus M).",
    )


class MigratorConfig(_Section):
    address: str = Field(default="{host}:7781", description="Agent address; {host} is replaced.")
    timeout_s: float = Field(default=5.0, gt=0, description="Per request to an agent.")
    addresses: dict[str, str] = Field(
        default_factory=dict,
        description='host = "ip:port" for hosts whose names do not resolve where '
        "clavisd runs; others use `address`.",
    )

    @field_validator("address")
    @classmethod
    def _host_and_port(cls, v: str) -> str:
        return _host_port(v)

    @field_validator("addresses")
    @classmethod
    def _each_host_and_port(cls, v: dict[str, str]) -> dict[str, str]:
        for host, addr in v.items():
            try:
                _host_port(addr)
            except ValueError as exc:
                raise ValueError(f"host {host!r}: {exc}") from exc
        return v


def _host_port(v: str) -> str:
    host, colon, port = v.replace("{host}", "h").rpartition(":")
    if not (colon and host and port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"{v!r} is not host:port (port 1-65535; {{host}} names the host)")
    return v


class AdviceConfig(_Section):
    path: Path = Field(
        default=Path("/run/clavis/advice.json"), description="Advice file for select_clavis."
    )
    valid_s: float = Field(
        default=180.0,
        gt=0,
        le=MAX_VALID_S,
        description="Readers ignore older advice (at most 3600).",
    )
    mode: str = Field(
        default="0600",
        description="Octal mode of the advice file, at most 0644 (no write or execute for "
        'group or others), e.g. "0640" with `group` for a slurmctld that runs as SlurmUser.',
    )
    group: str = Field(
        default="",
        description="Group of the advice file (a name or a number; it must exist); empty: "
        "clavisd's own group.",
    )

    @field_validator("mode")
    @classmethod
    def _octal_mode(cls, v: str) -> str:
        if not re.fullmatch(r"0?[0-7]{3}", v):
            raise ValueError(f'{v!r} is not an octal mode like "0640"')
        if int(v, 8) & ~ADVICE_MAX_MODE:
            raise ValueError(
                f"{v!r} gives more than {ADVICE_MAX_MODE:04o}: nobody but clavisd may write "
                "the advice, and nobody needs to execute it"
            )
        return v

    @field_validator("group")
    @classmethod
    def _known_group(cls, v: str) -> str:
        if v:
            group_id(v)  # raises ValueError naming the group
        return v

    @property
    def file_mode(self) -> int:
        return int(self.mode, 8)

    @property
    def file_gid(self) -> int | None:
        """The advice file's group id, or None to leave clavisd's own."""
        return group_id(self.group) if self.group else None


# The advice steers placements: only its writer may change it (docs/clavisd.md).
ADVICE_MAX_MODE: Final = 0o644


def group_id(group: str) -> int:
    """A group name or number as a gid; ValueError when no such group exists."""
    try:
        return grp.getgrgid(int(group)).gr_gid if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError(f"no group {group!r} on this host") from None


class Config(_Section):
    cluster_file: Path = Field(
        default=Path("/etc/clavis/cluster.yaml"),
        description="Hosts, racks, domains, power (docs/schema/cluster.schema.json).",
    )
    server: ServerConfig = ServerConfig()
    store: StoreConfig = StoreConfig()
    security: SecurityConfig = SecurityConfig()
    users: list[User] = Field(
        default_factory=list, description="UI logins: `[[users]]` name, role, password_scrypt."
    )
    ingest: IngestConfig = IngestConfig()
    retention: RetentionConfig = RetentionConfig()
    classify: ClassifyConfig = ClassifyConfig()
    repack: RepackConfig = RepackConfig()
    migrator: MigratorConfig = MigratorConfig()
    advice: AdviceConfig = AdviceConfig()
    host_power: HostPowerConfig = HostPowerConfig()
    slurm_power: SlurmPowerConfig = SlurmPowerConfig()

    @model_validator(mode="after")
    def _writer_reaches_the_store(self) -> Config:
        if self.ingest.writer == "process" and self.store.url in {
            "sqlite://",
            "sqlite:///:memory:",
        }:
            raise ValueError(
                "store.url: an in-memory SQLite store cannot be shared with the writer "
                'process; use a file, or ingest.writer = "thread"'
            )
        return self


class ConfigError(Exception):
    """The configuration file is unreadable or invalid; the message lists every problem."""


def load_config(path: Path = DEFAULT_PATH) -> Config:
    try:
        data = tomllib.loads(decode(path.read_bytes(), path))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except InputError as exc:  # not UTF-8: the same message as for the solver's documents
        raise ConfigError(str(exc)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {describe(exc, data)}") from exc
