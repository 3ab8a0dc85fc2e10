"""The advice file clavisd publishes for select_clavis.so (initial placement hint).

Per Slurm node (= container): the host it runs on, the host's rack and whether that
host is contended now. The select plugin fails open: a missing, stale (older than
``valid_s``) or malformed file changes nothing in Slurm's choice.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field, field_validator

from clavis_contracts.common import AwareDatetime, Name, Strict

ADVICE_VERSION: Final = 1

# "contended": the host runs devils beyond its tolerance (docs/objectives.md, D);
# "devil-free": no devil on the host; "ok": devils within tolerance; "unknown": no
# recent report from the host.
Contention = Literal["devil-free", "ok", "contended", "unknown"]


class AdviceNode(Strict):
    node: Name = Field(description="Slurm node name (= container name).")
    host: Name
    rack: Name
    contention: Contention
    node_class: Literal["devil", "turtle", "unknown"] = Field(
        description="Class of the job running on the node, if any."
    )


class AdviceFile(Strict):
    schema_version: Literal[1] = ADVICE_VERSION
    kind: Literal["clavis.advice"] = "clavis.advice"
    generated: AwareDatetime
    valid_s: float = Field(gt=0, description="Readers ignore the file once this old.")
    nodes: list[AdviceNode]

    @field_validator("nodes")
    @classmethod
    def _unique(cls, nodes: list[AdviceNode]) -> list[AdviceNode]:
        names = [n.node for n in nodes]
        if len(set(names)) != len(names):
            raise ValueError("a node is listed twice")
        return nodes
