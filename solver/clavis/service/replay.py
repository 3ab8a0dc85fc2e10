"""Decision replay: the exact inputs and options a plan was made from, as one versioned
record (``docs/schema/replay.schema.json``), and the comparison of a new solve with it.

clavisd writes a record for every plan it makes: stored with the plan in the same
transaction (table ``plan_replays``, store migration 6), or, for a plan it only shows (a
dry run, a deferred proposal), in the proposal's ``summary.replay``. ``clavis plan export``
(``GET /api/v1/plans/{id}/replay``) gets a stored one out; ``clavis solve --replay FILE``
solves it again and compares (docs/clavisd.md, "Decision replay").

A record is validated when it is written (``encode`` reads back what it wrote) and when it
is read (``decode``): its documents are the solver's own models, its assignments name only
its containers and hosts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from clavis.documents import InputError, describe
from clavis.instance import Instance, build_instance
from clavis.model import Cluster, Name, ObjectiveValues, Placement, Workload
from clavis.objectives import Score, Weights, score, violations
from clavis.placement import METHODS, SolveOptions
from clavis.placement.result import PlacementResult
from clavis.report import objective_values
from clavis.service.snapshot import cluster_mismatch

REPLAY_KIND: Final = "clavis.replay"
REPLAY_SCHEMA_VERSION: Final = 1
# Values that the same arithmetic on the same inputs must give again: equal up to float
# noise (relative), for the evaluator's re-score and for a deterministic solve.
EXACT_REL: Final = 1e-9
# A solve on the wall clock may end elsewhere; its F is compared within this (absolute, F
# is a weighted sum of values normalised to [0, 1]): half the default repack.margin, so a
# replay within it would have made the same decision whenever the plan's gain cleared the
# margin by more than that.
WALL_CLOCK_TOLERANCE: Final = 0.01


class ReplayError(InputError):
    """A replay record that cannot be read, or does not fit what it is checked against;
    the message names the source and the field (the CLI exits 2)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class RecordedWeights(_Strict):
    values: ObjectiveValues = Field(description="P, D, C, M as F used them (scaled to sum 1).")
    source: Literal["calibrated", "configured"] = Field(
        description="calibrated: the newest stored weights file; configured: "
        "repack.default_weights."
    )
    id: int | None = Field(
        ge=1, description="The stored weights file's id when calibrated; null when configured."
    )

    @model_validator(mode="after")
    def _usable(self) -> RecordedWeights:
        self.weights()  # non-negative, one positive (objectives.Weights)
        if (self.source == "calibrated") != (self.id is not None):
            raise ValueError("id is given exactly when source is 'calibrated'")
        return self

    def weights(self) -> Weights:
        v = self.values
        return Weights(v.P, v.D, v.C, v.M)


class RecordedOptions(_Strict):
    """Everything that changes the solver's answer besides its documents and weights."""

    method: str = Field(description="Placement method (`clavis solve --method`).")
    time_limit_s: float = Field(
        gt=0, description="Wall-clock seconds, or CP-SAT deterministic seconds when deterministic."
    )
    seed: int
    workers: int = Field(ge=1, description="Solver threads the solve was given (resolved).")
    memory_limit_bytes: int = Field(gt=0, description="Resident memory budget (resolved).")
    deterministic: bool = Field(
        description="CP-SAT alone on one worker with a deterministic time budget: the same "
        "record gives the same placement. False: the search turns and the bound run on the "
        "wall clock, so a replay may end elsewhere."
    )
    warm_start: Literal["current"] = Field(
        default="current", description="The solve is warm-started from the current placement."
    )

    @model_validator(mode="after")
    def _known_method(self) -> RecordedOptions:
        if self.method not in METHODS:
            raise ValueError(f"method {self.method!r} is not one of {', '.join(METHODS)}")
        return self

    def solve_options(self, hint: tuple[int, ...]) -> SolveOptions:
        return SolveOptions(
            time_limit=self.time_limit_s, seed=self.seed, workers=self.workers, hint=hint,
            deterministic=self.deterministic, memory_limit=self.memory_limit_bytes,
        )  # fmt: skip


class Software(_Strict):
    """What solved: the same documents and options may answer otherwise in other versions."""

    clavis_solver: str
    ortools: str


def software() -> Software:
    return Software(clavis_solver=version("clavis-solver"), ortools=version("ortools"))


def software_note(recorded: Software) -> str:
    """A note when this replay runs other versions than the record was made with."""
    here = software()
    if here == recorded:
        return ""
    pairs = (("clavis-solver", recorded.clavis_solver, here.clavis_solver),
             ("ortools", recorded.ortools, here.ortools))  # fmt: skip
    changed = "; ".join(f"{n} {a} recorded, {b} here" for n, a, b in pairs if a != b)
    return (
        f"note: other software than the record's ({changed}): even a deterministic solve may differ"
    )


class RecordedOutcome(_Strict):
    """What the solver answered: the placement the plan's moves lead to, and its score."""

    method: str
    status: str
    assignment: dict[Name, Name]
    raw: ObjectiveValues
    normalised: ObjectiveValues
    F: float
    bound: float | None
    seconds: float = Field(ge=0)


class ReplayRecord(_Strict):
    """The exact solver documents, weights and options a clavisd plan was made from, and
    the solver's answer (``clavis solve --replay`` solves them again and compares)."""

    schema_version: Literal[1] = REPLAY_SCHEMA_VERSION
    kind: Literal["clavis.replay"] = REPLAY_KIND
    plan: int | None = Field(
        ge=1, description="The stored plan's id; null for a plan shown and not stored (a dry "
        "run's, or a deferred one)."
    )  # fmt: skip
    made: float = Field(description="When the plan was made, unix seconds.")
    decision: Literal["planned", "deferred"]
    margin: float = Field(ge=0, le=1, description="repack.margin the decision was made with.")
    cluster: Cluster = Field(
        description="The cluster as clavisd gave it to the solver: hosts silent or not known "
        "to be on as drain, fitted power models in place of the cluster file's."
    )
    workload: Workload
    current: Placement = Field(description="Where every container ran (M is measured from it).")
    weights: RecordedWeights
    options: RecordedOptions
    software: Software
    outcome: RecordedOutcome

    @model_validator(mode="after")
    def _consistent(self) -> ReplayRecord:
        hosts = {h.name for h in self.cluster.hosts}
        names = {c.name for j in self.workload.jobs for c in j.containers}
        for field, assignment in (("current", self.current.assignment),
                                  ("outcome", self.outcome.assignment)):  # fmt: skip
            if set(assignment) != names:
                odd = sorted(set(assignment) ^ names)[:3]
                raise ValueError(f"{field}.assignment must place exactly the workload's "
                                 f"containers (differs on {odd})")  # fmt: skip
            stray = sorted({h for h in assignment.values() if h not in hosts})
            if stray:
                raise ValueError(f"{field}.assignment names hosts not in the cluster: {stray[:3]}")
        return self


def record_of(
    *,
    cluster: Cluster,
    workload: Workload,
    current: Placement,
    weights: Weights,
    weights_source: Literal["calibrated", "configured"],
    weights_id: int | None,
    method: str,
    options: SolveOptions,
    result: PlacementResult,
    decision: Literal["planned", "deferred"],
    margin: float,
    made: float,
) -> ReplayRecord:
    """The record of one solve that became a plan (``plan`` is set when it is stored)."""
    assert result.assignment is not None and result.score is not None
    names = [c.name for j in workload.jobs for c in j.containers]
    hosts = [h.name for h in cluster.hosts]
    s = result.score
    return ReplayRecord(
        plan=None, made=made, decision=decision, margin=margin,
        cluster=cluster, workload=workload, current=current,
        weights=RecordedWeights(
            values=objective_values(weights), source=weights_source, id=weights_id
        ),
        options=RecordedOptions(
            method=method, time_limit_s=options.time_limit, seed=options.seed,
            workers=options.threads, memory_limit_bytes=_memory(options),
            deterministic=options.deterministic,
        ),
        software=software(),
        outcome=RecordedOutcome(
            method=result.method, status=result.status,
            assignment={n: hosts[h] for n, h in zip(names, result.assignment, strict=True)},
            raw=objective_values(s.raw), normalised=objective_values(s.normalised),
            F=s.F, bound=result.bound,
            seconds=round(result.seconds, 3),
        ),
    )  # fmt: skip


def _memory(options: SolveOptions) -> int:
    if options.memory_limit is None:
        raise ValueError("a recorded solve needs its memory budget resolved (memory_limit)")
    return options.memory_limit


def encode(record: ReplayRecord) -> str:
    """The record as stored and exported; read back before it is handed on, so a record
    that would not validate is never written."""
    text = record.model_dump_json()
    decode(text, "replay record being written")
    return text


def decode(text: str | bytes, source: str) -> ReplayRecord:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ReplayError(f"{source}: not valid JSON: {exc}") from exc
    return parse(data, source)


def parse(data: Any, source: str) -> ReplayRecord:
    """A replay record from parsed JSON or YAML; ReplayError naming the field."""
    if not isinstance(data, dict):
        raise ReplayError(f"{source}: expected a replay record (a mapping) at the top level")
    if "kind" not in data and "steps" in data and "summary" in data:
        raise ReplayError(f"{source}: this is a plan (GET /api/v1/plans/ID), not its replay "
                          "record: get that with `clavis plan export ID`")  # fmt: skip
    if data.get("kind") != REPLAY_KIND:
        raise ReplayError(f"{source}: kind: {data.get('kind')!r} is not a replay record "
                          f"({REPLAY_KIND!r})")  # fmt: skip
    version = data.get("schema_version")
    if version != REPLAY_SCHEMA_VERSION or isinstance(version, bool):
        raise ReplayError(f"{source}: schema_version: {version!r}; this clavis reads replay "
                          f"records of schema_version {REPLAY_SCHEMA_VERSION}")  # fmt: skip
    try:
        return ReplayRecord.model_validate(data, strict=True)
    except ValidationError as exc:
        # the record-wide checks (ReplayRecord._consistent) name their fields themselves
        found = describe(exc, data).replace("(document): ", "")
        raise ReplayError(f"{source}: {found}") from None


def check_cluster(record: ReplayRecord, ours: Cluster, source: str, where: str) -> None:
    """Refuse a record made for another cluster than ``ours`` (its name, hosts, their
    cores and racks; power and states may differ: clavisd fits power models and drains
    silent hosts)."""
    other = cluster_mismatch(record.cluster, ours, "the record", f"{where} names")
    if other is not None:
        raise ReplayError(f"{source}: cluster: the record is for another cluster: {other}")


def instance(record: ReplayRecord, source: str) -> Instance:
    """The instance the plan was solved on, built as repacking builds it."""
    return build_instance(record.cluster, record.workload, record.current,
                          current_source=f"{source}: current",
                          workload_source=f"{source}: workload")  # fmt: skip


# --- comparing a replay with the record ------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One value, stored and replayed (P, D, C, M normalised as F weighs them; F)."""

    name: str
    stored: float
    replayed: float | None

    @property
    def diff(self) -> float | None:
        return None if self.replayed is None else self.replayed - self.stored


@dataclass(frozen=True)
class Comparison:
    deterministic: bool
    tolerance: float  # absolute on F for a wall-clock record; relative for a deterministic one
    rescored: tuple[Row, ...]  # the stored placement scored again on the stored inputs
    rescore_equal: bool
    rows: tuple[Row, ...]  # the replay's values against the stored outcome's
    moved: tuple[tuple[str, str, str], ...]  # container, stored host, replayed host
    containers: int
    reproduced: bool
    verdict: str
    margin: str = ""  # whether the replay's placement would clear repack.margin as the plan's did


def _rows(stored: RecordedOutcome, got: Score | None) -> tuple[Row, ...]:
    new = None if got is None else (*got.normalised.as_tuple(), got.F)
    olds = (stored.normalised.P, stored.normalised.D, stored.normalised.C, stored.normalised.M,
            stored.F)  # fmt: skip
    return tuple(Row(name, old, None if new is None else new[k])
                 for k, (name, old) in enumerate(zip(("P_n", "D_n", "C_n", "M_n", "F"), olds,
                                                     strict=True)))  # fmt: skip


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=EXACT_REL, abs_tol=EXACT_REL)


def compare(
    record: ReplayRecord,
    inst: Instance,
    result: PlacementResult,
    tolerance: float | None = None,
) -> Comparison:
    """How the replay's ``result`` compares with the record's outcome. The stored placement
    is first scored again on the stored inputs, which must give the stored values (same
    evaluator, same documents). A deterministic record is reproduced when the replay's
    placement is the stored one and its values equal them; a wall-clock record when the
    replay's F is within ``tolerance`` (default WALL_CLOCK_TOLERANCE) of the stored F."""
    out = record.outcome
    weights = record.weights.weights()
    stored_at = inst.assignment_of(Placement(assignment=out.assignment), "outcome")
    again = score(inst, stored_at, weights)
    rescored = _rows(out, again)
    raw_rows = zip(out.raw.model_dump().values(), again.raw.as_tuple(), strict=True)
    rescore_equal = all(_close(r.stored, r.replayed or 0.0) for r in rescored) and all(
        _close(a, b) for a, b in raw_rows
    )
    rows = _rows(out, result.score)
    moved: tuple[tuple[str, str, str], ...] = ()
    if result.assignment is not None:
        moved = tuple((c.name, out.assignment[c.name], inst.hosts[h].name)
                      for c, h in zip(inst.containers, result.assignment, strict=True)
                      if inst.hosts[h].name != out.assignment[c.name])  # fmt: skip
    det = record.options.deterministic
    margin = _margin_line(record, inst, weights, result.score)
    tol = EXACT_REL if det else (WALL_CLOCK_TOLERANCE if tolerance is None else tolerance)
    if not rescore_equal:
        ok, verdict = (
            False,
            (
                "not reproduced: the stored placement scores differently on the "
                "stored inputs (the record was altered, or the evaluator changed)"
            ),
        )
    elif result.score is None:
        ok, verdict = False, f"not reproduced: the replay found no placement ({result.status})"
    elif det:
        same_values = all(_close(r.stored, r.replayed or 0.0) for r in rows)
        ok = not moved and same_values
        verdict = ("reproduced: deterministic record, the same placement and P, D, C, M, F"
                   if ok else "not reproduced: deterministic record, but the replay's "
                   + ("placement differs" if moved else "values differ"))  # fmt: skip
    else:
        gap = abs(result.score.F - out.F)
        ok = gap <= tol
        where = "the same placement" if not moved else f"{len(moved)} containers placed elsewhere"
        verdict = (f"{'reproduced' if ok else 'not reproduced'}: wall-clock record, F within "
                   f"{tol:g} of the stored F ({gap:.3g} apart; {where})")  # fmt: skip
    return Comparison(det, tol, rescored, rescore_equal, rows, moved, len(inst.containers),
                      ok, verdict, margin)  # fmt: skip


def _margin_line(record: ReplayRecord, inst: Instance, weights: Weights, got: Score | None) -> str:
    """The recorded and the replayed gain over the current placement against the margin
    (the solver's F; a plan with deferred moves was judged on what its steps reach)."""
    now = score(inst, tuple(h for h in inst.current if h is not None), weights).F
    line = (f"margin: current placement F {now:.6f}; recorded F {record.outcome.F:.6f} "
            f"(gain {now - record.outcome.F:.6f})")  # fmt: skip
    if got is None:
        return line + f"; repack.margin {record.margin:g}"
    clears = now - got.F > record.margin
    return line + (f"; replay F {got.F:.6f} (gain {now - got.F:.6f}); repack.margin "
                   f"{record.margin:g}: the replay's placement would "
                   f"{'clear it too' if clears else 'not clear it'}")  # fmt: skip


def refuse_violations(record: ReplayRecord, inst: Instance, source: str) -> None:
    """The stored placement must be one the checker accepts on the stored inputs."""
    at = inst.assignment_of(Placement(assignment=record.outcome.assignment),
                            f"{source}: outcome")  # fmt: skip
    problems = violations(inst, at)
    if problems:
        raise ReplayError(f"{source}: outcome.assignment: {problems[0]}")
