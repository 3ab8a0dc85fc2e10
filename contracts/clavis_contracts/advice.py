"""The advice file clavisd publishes for select_clavis.so (initial placement hint).

Per Slurm node (= container): the host it runs on, the host's rack, whether that host is
contended now and the class of what runs on the node. Version 2 adds ``apps``: clavisd's
per-application class memory (ReSense, Dey et al. 2013 §2.2), keyed by the application
key of clavis_contracts.application (``UID:NAME``), which select_clavis computes from a
pending job's record, so a job whose application was seen as a devil before is steered
with no ``--clavis-class``. The select plugin fails open: a missing, stale (older than
``valid_s``) or malformed file changes nothing in Slurm's choice; it still reads version 1
files (without ``apps``).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field, field_validator, model_validator

from clavis_contracts.application import is_app_key
from clavis_contracts.common import AwareDatetime, Name, Strict

ADVICE_VERSION: Final = 2
# The longest an advice file may stay valid. clavisd rewrites it every few seconds, so an
# hour is ample; without a bound a file with a huge valid_s would steer placements for
# ever after clavisd stopped (issue 15, item 10).
MAX_VALID_S: Final = 3600.0
# How far ahead of the reader's clock ``generated`` may be (clock steps between the head
# node's hosts): beyond it the file is not fresh, so a far-future time is never fresh.
MAX_AHEAD_S: Final = 60.0
MAX_NODES: Final = 65536  # select_clavis refuses a longer list
MAX_APPS: Final = 65536  # likewise; clavisd lists the most recently decided first

# "contended": the host runs devils beyond its tolerance (docs/objectives.md, D);
# "ok": devils within tolerance; "devil-free": every container on the host is measured
# (or hinted) and none is a devil; "unknown": no recent report from the host, or a
# container on it whose class nothing tells yet.
Contention = Literal["devil-free", "ok", "contended", "unknown"]


class AdviceNode(Strict):
    node: Name = Field(description="Slurm node name (= container name).")
    host: Name
    rack: Name
    contention: Contention
    node_class: Literal["devil", "turtle", "unknown"] = Field(
        description="Class of what runs in the node: the user's hint, else the measured "
        "class; unknown when neither is known."
    )


class AdviceApp(Strict):
    app: str = Field(
        min_length=3,
        max_length=256,
        description="Application key UID:NAME (clavis_contracts.application): the job "
        "owner's uid and the Slurm job name.",
    )
    app_class: Literal["devil", "turtle"] = Field(
        description="The class the application's last decided job had (measured, never a hint)."
    )
    jobs_seen: int = Field(ge=1, description="Class decisions of its jobs so far.")

    @field_validator("app")
    @classmethod
    def _key(cls, app: str) -> str:
        if not is_app_key(app):
            raise ValueError(f"app {app!r} is not an application key UID:NAME")
        return app


class AdviceFile(Strict):
    schema_version: Literal[1, 2] = ADVICE_VERSION
    kind: Literal["clavis.advice"] = "clavis.advice"
    generated: AwareDatetime
    valid_s: float = Field(
        gt=0,
        le=MAX_VALID_S,
        description="Readers ignore the file once this old, or when generated lies further "
        f"ahead than {MAX_AHEAD_S:g} s (clavis_contracts.advice.MAX_AHEAD_S).",
    )
    nodes: list[AdviceNode] = Field(max_length=MAX_NODES)
    apps: list[AdviceApp] = Field(
        default_factory=list,
        max_length=MAX_APPS,
        description="Per-application class memory (schema version 2).",
    )

    @field_validator("nodes")
    @classmethod
    def _unique(cls, nodes: list[AdviceNode]) -> list[AdviceNode]:
        names = [n.node for n in nodes]
        if len(set(names)) != len(names):
            raise ValueError("a node is listed twice")
        return nodes

    @field_validator("apps")
    @classmethod
    def _unique_apps(cls, apps: list[AdviceApp]) -> list[AdviceApp]:
        keys = [a.app for a in apps]
        if len(set(keys)) != len(keys):
            raise ValueError("an application is listed twice")
        return apps

    def fresh(self, now: float) -> bool:
        """Whether a reader at ``now`` (Unix seconds) may use the file: at most ``valid_s``
        old and not more than MAX_AHEAD_S in the future."""
        age = now - self.generated.timestamp()
        return -MAX_AHEAD_S <= age <= self.valid_s

    @model_validator(mode="after")
    def _versioned(self) -> AdviceFile:
        if self.schema_version == 1 and "apps" in self.model_fields_set:
            raise ValueError("apps needs schema_version 2")
        return self
