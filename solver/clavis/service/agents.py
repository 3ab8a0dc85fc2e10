"""clavisd's side of the migration contract: signed calls to the clavis-migrator agents.

Contract (``clavis_contracts.migration``): ``POST /api/v1/steps`` with a MigrationStep,
``GET /api/v1/steps/{step_id}``; both answer a StepStatus. A request to a host's agent is
signed with that host's key (the first listed for it in ``security.agent_keys_file``), and
a step carries the key of its agent-to-agent calls, wrapped for its source
(clavis_contracts.keys, docs/migrator.md "Keys").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import httpx
from pydantic import ValidationError

from clavis_contracts import MigrationStep, StepStatus
from clavis_contracts.keys import AgentKey, with_peer_key
from clavis_contracts.signing import sign


class AgentUnavailableError(Exception):
    """No migrator agent answered; nothing was started."""


class AgentProtocolError(Exception):
    """An agent answered, but not with a valid StepStatus."""


class MigratorClient:
    def __init__(
        self,
        keys: Callable[[str], AgentKey | None],
        address_template: str,
        timeout_s: float,
        addresses: Mapping[str, str] | None = None,
    ) -> None:
        """``keys``: a host's name -> the key clavisd signs its requests to it with."""
        self._keys = keys
        self.template = address_template
        self.timeout_s = timeout_s
        # per-host addresses where host names do not resolve (the testbed's head netns)
        self.addresses = dict(addresses or {})

    def __repr__(self) -> str:
        return f"MigratorClient({self.template!r})"

    def address(self, host: str) -> str:
        return self.addresses.get(host) or self.template.replace("{host}", host)

    def _key(self, host: str) -> AgentKey:
        key = self._keys(host)
        if key is None:  # nothing sent: the plan waits, as for an agent that is down
            raise AgentUnavailableError(f"no agent key for host {host} in the keys file")
        return key

    def _call(self, host: str, method: str, path: str, body: bytes) -> StepStatus:
        url = f"http://{self.address(host)}{path}"
        key = self._key(host)
        headers = sign(key.secret_bytes, method, path, body, time.time(), key_id=key.id)
        headers["Content-Type"] = "application/json"
        try:
            r = httpx.request(method, url, content=body, headers=headers, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise AgentUnavailableError(
                f"no migrator agent answered on host {host} ({self.address(host)}): {exc}"
            ) from exc
        if r.status_code >= 400:
            raise AgentProtocolError(f"migrator on {host} answered {r.status_code}: {r.text[:300]}")
        try:
            return StepStatus.model_validate_json(r.content)
        except ValidationError as exc:
            raise AgentProtocolError(
                f"migrator on {host} sent an invalid StepStatus: {exc}"
            ) from exc

    def send(self, step: MigrationStep) -> StepStatus:
        keyed = with_peer_key(step, self._key(step.source), self._key(step.target))
        return self._call(step.source, "POST", "/api/v1/steps", keyed.model_dump_json().encode())

    def status(self, host: str, step_id: str) -> StepStatus:
        return self._call(host, "GET", f"/api/v1/steps/{step_id}", b"")
