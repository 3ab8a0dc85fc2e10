"""What the HTTP edge (api, reports, the *_api routers) needs of the running service:
owned by the edge, so the edge names no composition root. daemon.Clavisd satisfies it
(mypy checks that where daemon.main passes its Clavisd to ``api.serve``); a request
finds it in ``request.app.state.clavisd`` (``service``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from fastapi import Request

    from clavis.model import Cluster
    from clavis.objectives import Weights
    from clavis.service.auth import AgentAuth
    from clavis.service.claims import ContainerClaims
    from clavis.service.classify import Thresholds
    from clavis.service.config import Config
    from clavis.service.hostpower import HostPower
    from clavis.service.ingest import Ingestor
    from clavis.service.rows import PowerModelRow
    from clavis.service.schemas import RepackOut
    from clavis.service.snapshot import Snapshot
    from clavis.service.store import Store
    from clavis.service.writer import ProcessIngestor


class Service(Protocol):
    config: Config
    cluster: Cluster
    host_names: set[str]
    host_cores: dict[str, int]
    thresholds: Thresholds
    store: Store
    schema_versions: list[int]
    auth: AgentAuth
    last_report: dict[str, float]
    claims: ContainerClaims
    moving: Callable[[str, str, str], bool]
    ingestor: Ingestor | ProcessIngestor
    dummy_hash: str  # checked against when the user is unknown: the same time either way
    host_power: HostPower | None

    def snapshot(self, now: float) -> Snapshot: ...

    def weights(self) -> tuple[Weights, Literal["calibrated", "configured"]]: ...

    def repack_once(self, apply: bool) -> RepackOut: ...

    def start_plan(self, plan_id: int) -> None: ...

    def fit_power_models(self, now: float) -> tuple[list[PowerModelRow], dict[str, str]]: ...


def service(request: Request) -> Service:
    """The service behind a request (create_app puts it in the app's state)."""
    d: Service = request.app.state.clavisd
    return d
