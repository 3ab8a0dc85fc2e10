"""Cluster, workload and placement: the versioned input documents of the solver.

Plain typed data with validation and no solver import. Every document carries
``schema_version``; the JSON Schemas published in ``docs/schema/`` are generated
from these classes (``clavis schema``), so the schema and the checks cannot drift.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION: Final = 1

Name = Annotated[
    str,
    Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"),
]
ContainerClass = Literal["devil", "turtle"]
HostState = Literal["up", "drain", "down"]


def _refuse_duplicates(what: str, values: Iterable[Hashable]) -> None:
    dup = [v for v, k in Counter(values).items() if k > 1]
    if dup:
        raise ValueError(f"duplicate {what} {dup[0]!r}")


class _Strict(BaseModel):
    """Unknown keys are errors: a misspelt option must not be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class PowerModel(_Strict):
    """Linear host power model: idle + (peak - idle) * busy_cores / cores; off_w when empty."""

    idle_w: float = Field(ge=0, description="Watts drawn by a powered host with no busy core.")
    peak_w: float = Field(
        ge=0, description="Watts drawn with every core busy. Must not be below idle_w."
    )
    off_w: float = Field(
        default=0.0,
        ge=0,
        description="Watts drawn by an empty host that is powered down or in standby. "
        "Must not be above idle_w.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> PowerModel:
        if self.peak_w < self.idle_w:
            raise ValueError(f"peak_w ({self.peak_w}) is below idle_w ({self.idle_w})")
        if self.off_w > self.idle_w:
            raise ValueError(f"off_w ({self.off_w}) is above idle_w ({self.idle_w})")
        return self


class Domains(_Strict):
    """Last-level-cache / NUMA domains of a host (DINO spreads devils over them)."""

    count: int = Field(ge=1, le=1024)
    cores_per_domain: int = Field(ge=1, le=4096)


class Host(_Strict):
    name: Name
    cores: int = Field(
        ge=1, le=65536, description="Must equal domains.count * domains.cores_per_domain."
    )
    domains: Domains
    rack: Name
    power: PowerModel
    state: HostState = Field(
        default="up",
        description="up: takes containers; drain: keeps the ones it has, takes no new ones "
        "(Slurm DRAIN); down: holds nothing.",
    )

    @model_validator(mode="after")
    def _domains_cover_cores(self) -> Host:
        total = self.domains.count * self.domains.cores_per_domain
        if total != self.cores:
            raise ValueError(
                f"domains.count * domains.cores_per_domain = {total} but cores = {self.cores}"
            )
        return self


class LinkCosts(_Strict):
    """Cost per byte/s of traffic by link class; a flow inside one host costs nothing."""

    same_rack: float = Field(default=1.0, ge=0)
    cross_rack: float = Field(
        default=4.0, ge=0, description="Must not be below same_rack (cheaper than in-rack)."
    )

    @model_validator(mode="after")
    def _ordered(self) -> LinkCosts:
        if self.cross_rack < self.same_rack:
            raise ValueError(
                f"cross_rack ({self.cross_rack}) must not be cheaper than same_rack "
                f"({self.same_rack})"
            )
        return self


class Cluster(_Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    name: Name = "cluster"
    hosts: list[Host] = Field(
        min_length=1, max_length=100_000, description="Host names must be unique."
    )
    links: LinkCosts = LinkCosts()
    empty_host: Literal["off", "idle"] = Field(
        default="off",
        description="How an empty host counts in P: 'off' draws power.off_w, 'idle' draws idle_w.",
    )
    devils_per_domain: int = Field(
        default=1,
        ge=1,
        description="Devil cores one LLC/NUMA domain holds before devils contend.",
    )

    @field_validator("hosts")
    @classmethod
    def _unique_hosts(cls, hosts: list[Host]) -> list[Host]:
        _refuse_duplicates("host name", (h.name for h in hosts))
        return hosts


class Container(_Strict):
    name: Name
    cores: int = Field(
        ge=1,
        le=65536,
        description="Must not exceed the cores of the largest host of the cluster it is "
        "placed on (checked with the cluster).",
    )
    memory_bytes: int = Field(ge=0)
    intensity_mpki: float = Field(
        ge=0,
        description="Off-chip requests (LLC misses + prefetches) per 1000 instructions.",
    )
    klass: ContainerClass | None = Field(
        default=None,
        alias="class",
        description="Override of the class derived from intensity_mpki and the threshold.",
    )

    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, populate_by_name=True
    )


class Flow(_Strict):
    """Traffic from one container to another of the same job."""

    src: Name = Field(description="A container of this job.")
    dst: Name = Field(description="A container of this job other than src.")
    bytes_per_s: float = Field(ge=0)

    @model_validator(mode="after")
    def _two_ends(self) -> Flow:
        if self.src == self.dst:
            raise ValueError(f"flow goes from {self.src!r} to itself (src and dst must differ)")
        return self


class Job(_Strict):
    name: Name
    containers: list[Container] = Field(min_length=1)
    traffic: list[Flow] = Field(
        default_factory=list,
        description="At most one flow per (src, dst) pair; both ends containers of this job.",
    )
    all_to_all_bytes_per_s: float = Field(
        default=0.0,
        ge=0,
        description=(
            "Bytes/s every container of the job sends to every other one (an MPI "
            "all-to-all pattern), on top of `traffic`: a job of n containers need not "
            "list n*(n-1) flows."
        ),
    )

    @model_validator(mode="after")
    def _flows_inside_job(self) -> Job:
        names = {c.name for c in self.containers}
        seen: set[tuple[str, str]] = set()
        for i, f in enumerate(self.traffic):
            for end in ("src", "dst"):
                value = getattr(f, end)
                if value not in names:
                    raise ValueError(
                        f"traffic[{i}].{end} = {value!r} is not a container of job {self.name!r}"
                    )
            if (f.src, f.dst) in seen:
                raise ValueError(f"traffic[{i}] repeats the flow {f.src!r} -> {f.dst!r}")
            seen.add((f.src, f.dst))
        return self


class Workload(_Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    devil_threshold_mpki: float = Field(
        default=4.5,
        gt=0,
        description="A container at or above this intensity is a devil (thesis §5.4: 4.5).",
    )
    jobs: list[Job] = Field(
        min_length=1,
        description="Job names must be unique, and container names unique across all jobs.",
    )

    @model_validator(mode="after")
    def _unique_names(self) -> Workload:
        _refuse_duplicates("job name", (j.name for j in self.jobs))
        _refuse_duplicates("container name", (c.name for j in self.jobs for c in j.containers))
        return self

    def classify(self, c: Container) -> ContainerClass:
        if c.klass is not None:
            return c.klass
        return "devil" if c.intensity_mpki >= self.devil_threshold_mpki else "turtle"


class ObjectiveValues(_Strict):
    P: float = Field(description="Cluster power, watts.")
    D: float = Field(description="Contended devil cores (straggler rule applied).")
    C: float = Field(description="Slow-link traffic, bytes/s weighted by link class cost.")
    M: float = Field(description="Container memory moved from the current placement, bytes.")


class Solution(_Strict):
    """How a placement was found and how it scores; written by `clavis solve`."""

    method: str
    status: str
    seconds: float
    seed: int
    time_limit: float
    weights: ObjectiveValues
    raw: ObjectiveValues
    normalised: ObjectiveValues
    lower: ObjectiveValues = Field(description="Normalisation lower bounds.")
    upper: ObjectiveValues = Field(description="Normalisation upper bounds.")
    F: float
    bound: float | None = Field(description="Proven lower bound on F, if the method has one.")
    gap: float | None


class Placement(_Strict):
    """Container name -> host name. Containers absent from it are not placed (yet)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    assignment: dict[Name, Name] = Field(
        description="Checked with the cluster and workload: every key a container of the "
        "workload, every value a host of the cluster that is not down, and no host given "
        "more cores than it has."
    )
    solution: Solution | None = None


# --- calibration documents (issue 3): fronts and weights ------------------------------

ObjectiveName = Literal["P", "D", "C", "M"]


class FrontPoint(_Strict):
    id: int = Field(ge=0)
    assignment: dict[Name, Name]
    raw: ObjectiveValues
    normalised: ObjectiveValues


class FrontSearch(_Strict):
    """How the front was found, so that it can be reproduced and audited."""

    algorithm: Literal["nsga2", "nsga3", "smsemoa"]
    population: int = Field(ge=4)
    generations: int = Field(ge=1)
    seed: int
    seed_time: float = Field(ge=0)
    objectives: list[ObjectiveName] = Field(min_length=2)
    evaluations: int = Field(ge=0)
    hypervolume: float
    seconds: float


class Front(_Strict):
    """Non-dominated placements with their inputs (stored whole for later audit)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    kind: Literal["clavis.front"] = "clavis.front"
    cluster: Cluster
    workload: Workload
    current: Placement | None = None
    search: FrontSearch
    lower: ObjectiveValues
    upper: ObjectiveValues
    points: list[FrontPoint] = Field(min_length=1, description="Point ids must be unique.")

    @field_validator("points")
    @classmethod
    def _unique_ids(cls, points: list[FrontPoint]) -> list[FrontPoint]:
        _refuse_duplicates("point id", (p.id for p in points))
        return points


class CalibrationOutcome(_Strict):
    method: Literal["thesis", "inverse"]
    weights: ObjectiveValues | None = None
    residual: float | None = None
    regret: float | None = Field(
        default=None, description="Mean amount by which the picks miss the front's best F."
    )
    error: str | None = None


class WeightsFile(_Strict):
    """Weights of P, D, C, M (sum 1) from `clavis calibrate`, read by solve and clavisd."""

    schema_version: Literal[1] = SCHEMA_VERSION
    kind: Literal["clavis.weights"] = "clavis.weights"
    weights: ObjectiveValues = Field(
        description="None negative, and at least one of P, D, C, M positive."
    )
    method: Literal["thesis", "inverse"]
    recommended: Literal["thesis", "inverse"]
    reason: str
    picks: list[int] = Field(min_length=3)
    front_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    outcomes: list[CalibrationOutcome]

    @model_validator(mode="after")
    def _usable_weights(self) -> WeightsFile:
        # F is a weighted sum to minimise: a negative weight would reward the objective it
        # weighs, and all zeros make every placement equal. NaN/inf are refused by _Strict.
        w = self.weights
        negative = [f"{k}={getattr(w, k):g}" for k in "PDCM" if getattr(w, k) < 0]
        if negative:
            raise ValueError(f"weights must not be negative: {', '.join(negative)}")
        if not any(getattr(w, k) > 0 for k in "PDCM"):
            raise ValueError("weights are all zero: at least one of P, D, C, M must be positive")
        return self
