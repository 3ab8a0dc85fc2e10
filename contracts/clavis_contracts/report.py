"""The monitor report: what a compute host's clavis-monitor sends clavisd once per interval.

One report per host and interval (thesis §5.4: the head node polls each node every few
seconds; DINO §3.3.3 classifies on 1 s intervals). Limits bound the work one report can
cause at the head node, so a broken or hostile agent cannot starve the others.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field, field_validator, model_validator

from clavis_contracts.application import is_app_key
from clavis_contracts.common import AwareDatetime, Name, Strict

# Version 2 added ContainerSample.class_hint, the "emulated" intensity source and the
# application key format of ``app`` (clavis_contracts.application). Version 3 added the
# host's memory (MonitorReport.memory_bytes), which every container's memory must fit.
# Reports of earlier versions are still accepted, without those, so monitors can be
# upgraded after clavisd.
REPORT_VERSION: Final = 3
MAX_CONTAINERS: Final = 1024
MAX_PEERS: Final = 4096

# Where a container's memory intensity came from. "perf": hardware counters read now;
# "recorded": counter values replayed from a recording (hosts without PMU access, tests);
# "emulated": a testbed's emulated miss counter (docs/testbed.md), never real hardware;
# "unsupported": no counters on this host, intensity_mpki is null.
IntensitySource = Literal["perf", "recorded", "emulated", "unsupported"]
# The user's --clavis-class when it names a class ("auto" is no hint and is not sent).
ReportedHint = Literal["devil", "turtle"]
PowerSource = Literal["ipmi-dcmi", "ipmi-sensor", "rapl", "none"]


class PowerReading(Strict):
    watts: float | None = Field(ge=0, le=1_000_000, description="Host power; null if unknown.")
    source: PowerSource

    @model_validator(mode="after")
    def _none_has_no_watts(self) -> PowerReading:
        if (self.source == "none") != (self.watts is None):
            raise ValueError("watts must be null exactly when source is 'none'")
        return self


class PeerTraffic(Strict):
    """Bytes per second this container sent to and received from one peer, summed."""

    peer: Name = Field(description="Peer container (Slurm node) name, or peer host name.")
    bytes_per_s: float = Field(ge=0, le=1e13)


class ContainerSample(Strict):
    name: Name = Field(description="Container name = Slurm node name.")
    job: Name | None = Field(default=None, description="Slurm job running in it, if any.")
    app: str | None = Field(
        default=None,
        max_length=256,
        description="Application key for per-application class memory: the job owner's "
        "uid, ':', the Slurm job name (UID:NAME, clavis_contracts.application; from "
        "schema_version 2 on this format is enforced); clavisd uses the job when absent.",
    )
    class_hint: ReportedHint | None = Field(
        default=None,
        description="The user's --clavis-class for the job in this container when it names "
        "a class (devil or turtle); null when none was given or it was auto. Schema "
        "version 2.",
    )
    cores: int = Field(ge=1, le=65536)
    memory_bytes: int = Field(ge=0, le=2**50)
    busy_cores: float = Field(ge=0, le=65536, description="Mean busy cores over the interval.")
    intensity_mpki: float | None = Field(
        ge=0,
        le=1e6,
        description="Off-chip requests (LLC misses + prefetches) per 1000 instructions.",
    )
    intensity_source: IntensitySource
    traffic: list[PeerTraffic] = Field(default_factory=list, max_length=MAX_PEERS)

    @model_validator(mode="after")
    def _consistent(self) -> ContainerSample:
        if (self.intensity_source == "unsupported") != (self.intensity_mpki is None):
            raise ValueError("intensity_mpki must be null exactly when intensity_source is "
                             "'unsupported'")  # fmt: skip
        if self.traffic:  # most samples list few peers; skip the sets when none
            peers = {t.peer for t in self.traffic}
            if len(peers) != len(self.traffic):
                raise ValueError("traffic lists a peer twice")
            if self.name in peers:
                raise ValueError(f"traffic of {self.name!r} lists itself as a peer")
        return self


class MonitorReport(Strict):
    schema_version: Literal[1, 2, 3] = REPORT_VERSION
    kind: Literal["clavis.report"] = "clavis.report"
    host: Name
    timestamp: AwareDatetime = Field(description="End of the sampled interval.")
    interval_s: float = Field(gt=0, le=3600, description="Length of the sampled interval.")
    busy_cores: float = Field(ge=0, le=65536, description="Mean busy cores of the whole host.")
    power: PowerReading
    memory_bytes: int | None = Field(
        default=None,
        ge=1,
        le=2**50,
        description="The host's memory (MemTotal); null when not measured. Every container's "
        "memory_bytes must be at most this (a container's limit, or the host's memory when it "
        "has none; limits may add up to more: they are caps, not reservations). Schema "
        "version 3.",
    )
    containers: list[ContainerSample] = Field(default_factory=list, max_length=MAX_CONTAINERS)

    @field_validator("containers")
    @classmethod
    def _unique(cls, containers: list[ContainerSample]) -> list[ContainerSample]:
        names = [c.name for c in containers]
        if len(set(names)) != len(names):
            raise ValueError("a container is listed twice")
        return containers

    @model_validator(mode="after")
    def _versioned(self) -> MonitorReport:
        if self.memory_bytes is not None:
            if self.schema_version < 3:
                raise ValueError("memory_bytes needs schema_version 3")
            for c in self.containers:
                if c.memory_bytes > self.memory_bytes:
                    raise ValueError(f"container {c.name!r} has {c.memory_bytes} bytes of "
                                     f"memory but the host has {self.memory_bytes}")  # fmt: skip
        for c in self.containers:
            if self.schema_version == 1:
                if c.class_hint is not None or c.intensity_source == "emulated":
                    raise ValueError(f"container {c.name!r}: class_hint and the 'emulated' "
                                     "intensity source need schema_version 2")  # fmt: skip
            elif c.app is not None and not is_app_key(c.app):
                raise ValueError(f"container {c.name!r}: app {c.app!r} is not an application "
                                 "key UID:NAME (clavis_contracts.application)")  # fmt: skip
        return self
