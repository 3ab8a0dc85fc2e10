"""Job-step registration: what spank_clavis.so tells the host's clavis-monitor.

slurmstepd (root) runs the SPANK plugin once per task; the plugin connects to the
monitor's local UNIX socket and sends one request, newline-terminated, and reads one
newline-terminated reply. The monitor then knows which Slurm job, step and tasks run in
which container (= Slurm node), which the cgroup scan can only guess. The exact wire
rules (socket path, permissions, size limit, timeouts) are in docs/monitor.md.

A register is additive and idempotent: sending the same (node, job, step) again adds its
pids and cgroups, so a per-task sender needs no coordination. A deregister drops the step
whatever its pids; deregistering an unknown step is not an error (the monitor may have
restarted in between).

Version 2 added ``job_name`` (from which, with ``uid``, the monitor makes the
application key of clavis_contracts.application) and says what the pids always were:
the sender's view, in the sender's pid namespace.
Version 1 requests are still accepted, without ``job_name``.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field, RootModel, field_validator, model_validator

from clavis_contracts.application import app_key
from clavis_contracts.common import Name, Strict

REGISTRATION_VERSION: Final = 2
MAX_JOB_NAME: Final = 1024
MAX_MESSAGE_BYTES: Final = 65536  # one request line, newline included
MAX_PIDS: Final = 4096
MAX_CGROUPS: Final = 32
PID_MAX: Final = 4194304  # the kernel's upper limit of /proc/sys/kernel/pid_max
UINT32_MAX: Final = 4294967295

# Class hint from the user (sbatch --clavis-class=...): "auto" lets clavisd classify
# from the measured intensity; "devil"/"turtle" state it for an application not yet seen.
ClassHint = Literal["auto", "devil", "turtle"]


def _cgroup_path(path: str) -> str:
    if not path.startswith("/sys/fs/cgroup/"):
        raise ValueError(f"cgroup path {path!r} must start with /sys/fs/cgroup/")
    parts = path.split("/")
    if ".." in parts or "." in parts or "" in parts[1:]:
        raise ValueError(f"cgroup path {path!r} must be normalised (no '.', '..' or '//')")
    if any(ord(ch) < 0x20 for ch in path):
        raise ValueError(f"cgroup path {path!r} contains a control character")
    return path


class _Step(Strict):
    schema_version: Literal[1, 2] = REGISTRATION_VERSION
    node: Name = Field(description="Slurm node name of the step (= the container's name).")
    job_id: int = Field(ge=1, le=UINT32_MAX, description="SLURM_JOB_ID.")
    step_id: int = Field(
        ge=0,
        le=UINT32_MAX,
        description="SLURM_STEP_ID as Slurm's uint32 (batch 4294967291, extern 4294967292, "
        "interactive 4294967290).",
    )


class RegisterStep(_Step):
    """One task (or several) of a job step started in a container."""

    op: Literal["register"]
    pids: list[Annotated[int, Field(ge=1, le=PID_MAX)]] = Field(
        min_length=1,
        max_length=MAX_PIDS,
        description="Task pids as the sender (slurmstepd) sees them, in its own pid namespace.",
    )
    cgroups: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=list,
        max_length=MAX_CGROUPS,
        description="The step's cgroup directories (one per v1 hierarchy, or the v2 one); "
        "empty: the monitor reads /proc/PID/cgroup itself.",
    )
    uid: int | None = Field(default=None, ge=0, le=UINT32_MAX, description="Job owner.")
    app: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Base name of the step's command (the batch script for the batch "
        "step); the application key's fallback name when job_name is absent.",
    )
    job_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_JOB_NAME,
        description="The Slurm job name (SLURM_JOB_NAME); with uid it makes the application "
        "key UID:NAME (clavis_contracts.application). Schema version 2.",
    )
    class_hint: ClassHint = "auto"

    @model_validator(mode="after")
    def _versioned(self) -> RegisterStep:
        if self.schema_version == 1 and self.job_name is not None:
            raise ValueError("job_name needs schema_version 2")
        return self

    def application(self) -> str | None:
        """The step's application key: uid and job name, or uid and command name when the
        job name is absent; None when the key cannot be made."""
        return app_key(self.uid, self.job_name if self.job_name is not None else self.app)

    @field_validator("cgroups")
    @classmethod
    def _paths(cls, cgroups: list[str]) -> list[str]:
        return [_cgroup_path(p) for p in cgroups]

    @field_validator("pids")
    @classmethod
    def _unique_pids(cls, pids: list[int]) -> list[int]:
        if len(set(pids)) != len(pids):
            raise ValueError("a pid is listed twice")
        return pids


class DeregisterStep(_Step):
    """The job step ended on this node (slurm_spank_exit in slurmstepd)."""

    op: Literal["deregister"]


class RegistrationRequest(RootModel[RegisterStep | DeregisterStep]):
    """One request line on the monitor's socket, told apart by ``op``."""

    root: RegisterStep | DeregisterStep = Field(discriminator="op")


class RegistrationReply(Strict):
    """The monitor's one-line answer. ``ok`` comes first on the wire so a C reader may
    test the prefix ``{"ok":true``; ``error`` says what was wrong with a refused request."""

    ok: bool
    error: str | None = Field(default=None, max_length=1024)
    schema_version: Literal[1, 2] = REGISTRATION_VERSION
