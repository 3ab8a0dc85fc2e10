"""What a migration backend does on one host; the step machine (steps.py) drives it.

A step calls, on the source: ``running``, ``precheckpoint`` per pre-copy round (if
configured), and ``checkpoint`` (the container stops, its
images are in a directory), then, on the target (through its agent): ``restore`` and
``verify``; on success ``commit`` on both hosts, on any failure before that ``kill`` on the
target and ``restore`` from the source's own images on the source (the rollback).
Every method raises :class:`BackendError` with a message an admin can act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class BackendError(Exception):
    """A backend operation failed; the message says what and where to look."""


class NotVerifiedError(BackendError):
    """The restored container runs, but something it had at the dump is not back (its
    TCP connections, its slurmd answering): a move is undone; a rollback, which has no
    better place for it, keeps it and says so."""


@dataclass(frozen=True)
class Size:
    """What a container may use: cores and memory limit (0 when it has no limit)."""

    cores: int
    memory_bytes: int


class Backend(Protocol):
    def running(self) -> dict[str, Size]:
        """The containers running on this host, with their sizes."""
        ...

    def known(self, name: str) -> bool:
        """Whether this host can run ``name`` (its configuration is here)."""
        ...

    def checkpoint(self, name: str, images: Path) -> None:
        """Dump ``name`` into the empty directory ``images``; the container stops.

        On failure the container should still run (CRIU resumes the tasks); the caller
        checks ``running`` and restores from ``images`` if it does not.
        """
        ...

    def precheckpoint(self, name: str, images: Path) -> None:
        """Dump ``name`` into the empty directory ``images`` and leave it running.

        A pre-copy round (precopy.py): the container pauses while it is dumped, then runs
        on. Raises BackendError if the dump fails; the caller checks ``running``.
        """
        ...

    def restore(self, name: str, images: Path) -> None:
        """Start ``name`` on this host from the images of a checkpoint."""
        ...

    def verify(self, name: str) -> str:
        """Check the restored container is up; a one-line description of what was seen."""
        ...

    def resume(self, name: str) -> None:
        """Let a restored container's processes run if ``verify`` left them stopped (it
        does when a check made before they run fails): a rollback that keeps such a
        container, having nowhere better for it, calls this."""
        ...

    def kill(self, name: str) -> None:
        """Stop ``name`` on this host at once if it runs here (a half-done restore)."""
        ...

    def commit(self, name: str, images: Path) -> None:
        """The step is done: drop this host's copy of the images (source and target)."""
        ...
