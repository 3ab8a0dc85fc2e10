"""The monitor's registration server as the plugin tests see it: every accepted request
is kept for the test to read."""

from __future__ import annotations

from clavis_contracts.registration import DeregisterStep, RegisterStep, RegistrationRequest
from clavis_monitor.registry import Registry


class RecordingRegistry(Registry):
    """The monitor's registry, keeping every accepted request for the test to read."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[RegisterStep | DeregisterStep] = []

    def apply(self, request: RegistrationRequest, now: float) -> str | None:
        self.requests.append(request.root)
        return super().apply(request, now)
