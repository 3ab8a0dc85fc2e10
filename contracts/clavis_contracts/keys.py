"""Agent keys: who signs a request, read from root-only key files (stdlib + pydantic).

Each compute host has its own keys; a request names the key it was signed with in the
``X-Clavis-Key-Id`` header (clavis_contracts.signing), so clavisd knows which host sent
it and accepts a report only for that host. Admin keys (for root's ``clavis repack`` on
the head node) are separate, and only they reach clavisd's admin endpoints. Power keys
(for Slurm's SuspendProgram and ResumeProgram, slurm-plugin/power/) reach
``/nodes/suspend`` and ``/nodes/resume`` and nothing else. A key file is TOML::

    [[keys]]
    id = "node7-2026a"        # letters, digits, . _ - (at most 64); unique
    host = "node7"            # the host it speaks for; or role = "admin" (or "power")
                              # and no host
    secret = "…"              # at least 16 bytes, e.g. `openssl rand -hex 32`; unique

clavisd's file lists every host's keys (two for one host during a rollover: both are
accepted); an agent's file lists its own, and it signs with the first. This module is
the one place both agents and clavisd read such files: a file that group or others may
read, or (read by root) that root does not own, is refused, and no error message ever
contains a secret.
"""

from __future__ import annotations

import hmac
import os
import stat
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from clavis_contracts.migration import MigrationStep
from clavis_contracts.signing import MIN_SECRET_BYTES

KEY_ID_PATTERN: Final = r"^[A-Za-z0-9._-]{1,64}$"
# agent: one host's monitor and migrator; admin: root on the head node (`clavis repack`);
# power: Slurm's power programs, for /nodes/suspend and /nodes/resume only
KeyRole = Literal["agent", "admin", "power"]


class KeyFileError(Exception):
    """A key or secret file is unusable; the message names the file and what is wrong,
    never a secret."""


class AgentKey(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    id: str = Field(pattern=KEY_ID_PATTERN)
    role: KeyRole = "agent"
    host: str = Field(default="", max_length=64)
    secret: str = Field(min_length=MIN_SECRET_BYTES, repr=False)

    @model_validator(mode="after")
    def _host_iff_agent(self) -> AgentKey:
        if self.role == "agent" and not self.host:
            raise ValueError('an agent key names its host (or set role = "admin" or "power")')
        if self.role != "agent" and self.host:
            raise ValueError(f"a {self.role} key speaks for no host: drop `host`")
        return self

    @property
    def secret_bytes(self) -> bytes:
        return self.secret.encode()

    @property
    def holder(self) -> str:
        """Whom the key speaks for, as messages name it: ``host NAME``, ``admin``, ``power``."""
        return f"host {self.host}" if self.role == "agent" else self.role

    def __str__(self) -> str:  # never the secret
        return f"key {self.id} ({self.holder})"


class _KeyFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    keys: list[AgentKey] = Field(min_length=1)


def private_bytes(path: Path, what: str) -> bytes:
    """The bytes of a root-only file (see ``check_private``)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read the {what}: {exc.strerror}") from exc
    check_private(path, what)
    return data


def check_private(path: Path, what: str) -> None:
    """Refuse a file that group or others may access, or, when root reads it, one another
    user owns (its owner could rewrite it)."""
    try:
        st = path.stat()
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read the {what}: {exc.strerror}") from exc
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"{path}: the {what} must be readable by its owner only (chmod 600); "
            f"its mode is {stat.S_IMODE(st.st_mode):04o}"
        )
    if os.geteuid() == 0 and st.st_uid != 0:
        raise KeyFileError(
            f"{path}: the {what} must be owned by root (chown root), not uid {st.st_uid}"
        )


def parse_keys(data: bytes, origin: str) -> tuple[AgentKey, ...]:
    """The keys of a key file's bytes; ``origin`` names it in errors."""
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise KeyFileError(f"{origin}: not UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        # the decoder's message quotes no value, only where it stopped
        raise KeyFileError(f"{origin}: not TOML: {exc}") from None
    try:
        keys = tuple(_KeyFile.model_validate(doc).keys)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'file'}: {e['msg']}" for e in exc.errors()
        )  # e["input"] is left out: it may be a secret
        raise KeyFileError(f"{origin}: {problems}") from None
    _distinct(keys, origin)
    return keys


def _distinct(keys: Sequence[AgentKey], origin: str) -> None:
    ids = [k.id for k in keys]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise KeyFileError(f"{origin}: key ids used twice: {', '.join(dup)}")
    # One secret under two ids (or roles) would let a host's key pass as the other.
    seen: dict[str, str] = {}
    for k in keys:
        if k.secret in seen:
            raise KeyFileError(f"{origin}: keys {seen[k.secret]} and {k.id} share a secret")
        seen[k.secret] = k.id


def load_keys(path: Path) -> tuple[AgentKey, ...]:
    """The keys of a private key file (see the module's docstring)."""
    return parse_keys(private_bytes(path, "key file"), str(path))


def own_key(path: Path, host: str) -> AgentKey:
    """The key an agent on ``host`` signs with: the first of its key file, which must be
    that host's."""
    key = load_keys(path)[0]
    if key.role != "agent" or key.host != host:
        raise KeyFileError(
            f"{path}: the first key, {key.id}, is for "
            f"{'host ' + repr(key.host) if key.role == 'agent' else f'no host ({key.role})'}, "
            f"not this host {host!r}"
        )
    return key


# --- per-step peer keys (the migrators) ----------------------------------------------------
#
# clavisd holds every host's keys; a migrator holds its own host's. For one migration step
# from host S to host T, clavisd derives a key only T can recompute (from its own key, the
# step id and S's name) and sends it to S inside the step, wrapped under the key S and
# clavisd share, so neither the network nor another host learns it. S signs its requests
# to T for that step with it (key id ``peer:<T's key id>:<S>``) and T checks them, and only
# on that step's peer paths: a host gets no standing key to any other host.

PEER_PREFIX: Final = "peer:"


def peer_step_secret(target: AgentKey, step_id: str, source: str) -> bytes:
    """The key of one step's agent-to-agent calls, from the target host's key."""
    message = f"clavis-peer-step\n{step_id}\n{source}".encode()
    return hmac.new(target.secret_bytes, message, "sha256").digest()


def peer_key_id(target: AgentKey, source: str) -> str:
    return f"{PEER_PREFIX}{target.id}:{source}"


def parse_peer_key_id(key_id: str) -> tuple[str, str] | None:
    """(target key id, source host) of a peer key id, or None if it is not one."""
    if not key_id.startswith(PEER_PREFIX):
        return None
    target, colon, source = key_id[len(PEER_PREFIX) :].partition(":")
    return (target, source) if colon and target and source else None


def _pad(holder: AgentKey, step_id: str) -> bytes:
    return hmac.new(holder.secret_bytes, f"clavis-peer-wrap\n{step_id}".encode(), "sha256").digest()


def wrap_peer_secret(holder: AgentKey, step_id: str, secret: bytes) -> str:
    """``secret`` (32 bytes) for ``holder`` only: XOR with a pad that only ``holder``'s
    key and the step id give (one pad per step: step ids are never reused)."""
    return bytes(a ^ b for a, b in zip(secret, _pad(holder, step_id), strict=True)).hex()


def unwrap_peer_secret(holder: AgentKey, step_id: str, wrapped: str) -> bytes:
    data = bytes.fromhex(wrapped)
    if len(data) != 32:
        raise ValueError("a wrapped peer key is 32 bytes")
    return bytes(a ^ b for a, b in zip(data, _pad(holder, step_id), strict=True))


def with_peer_key(step: MigrationStep, source: AgentKey, target: AgentKey) -> MigrationStep:
    """``step`` as clavisd sends it to the source's agent: with the key of its calls to
    the target's agent, wrapped for ``source`` (the key clavisd signs the request with)."""
    secret = peer_step_secret(target, step.step_id, step.source)
    return step.model_copy(update={
        "peer_key_id": peer_key_id(target, step.source),
        "peer_key": wrap_peer_secret(source, step.step_id, secret),
    })  # fmt: skip
