"""Who may call clavisd: agents by HMAC-signed requests, people by login and role.

Each host's agents sign with that host's key, root's `clavis repack` with an admin key
(clavis_contracts.keys: root-only key files; the signing itself is in
``clavis_contracts.signing`` so agents import it without the solver). A host key is good
for that host's reports only; only admin keys reach the admin endpoints. UI users log in
with a password (scrypt hashes in the config) and get a bearer token; the ``admin`` role
may change weights and apply plans, ``viewer`` only reads. Secrets and passwords never
reach a log line or an error message.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, NamedTuple

from clavis_contracts.keys import AgentKey, KeyFileError, load_keys
from clavis_contracts.signing import (
    KEY_ID,
    REPLAYED,
    NonceCache,
    SignatureError,
    Signed,
    key_id_of,
    verify,
)

if TYPE_CHECKING:
    from clavis.service.config import User
    from clavis.service.rows import Session
    from clavis.service.store import Store

log = logging.getLogger("clavisd.auth")
Role = Literal["admin", "viewer"]
_SCRYPT_N: Final = 2**14
_SCRYPT_R: Final = 8
_SCRYPT_P: Final = 1


class AuthError(Exception):
    """Authentication failed; the message is safe to return to the caller."""


SecretFileError = KeyFileError  # the name clavisd's callers know


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, dklen=32
    )
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${salt.hex()}${digest.hex()}"


def check_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        got = hashlib.scrypt(
            password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p),
            dklen=len(bytes.fromhex(digest)),
        )  # fmt: skip
    except ValueError:
        return False
    return hmac.compare_digest(got.hex(), digest)


def token_digest(token: str) -> str:
    """Sessions are stored by the SHA-256 of their token: a leaked store grants nothing."""
    return hashlib.sha256(token.encode()).hexdigest()


def credential(name: str, role: str, password_scrypt: str) -> str:
    """What a session is granted from: a user's name, role and password hash. A session
    stores it and is honoured only while the configured user still has the same one, so
    removing a user, changing their role or their password ends their sessions (at once
    for a running clavisd's config; across a restart for an edited one)."""
    text = "\n".join(("clavis-session", name, role, password_scrypt))
    return hashlib.sha256(text.encode()).hexdigest()


def session_role(users: Sequence[User], session: Session) -> Role | None:
    """The role a stored session still grants under ``users`` (the running config), or
    None when its user is gone or their role or password changed since it was made."""
    user = next((u for u in users if u.name == session.user), None)
    if user is None or session.role != user.role:
        return None
    now = credential(user.name, user.role, user.password_scrypt)
    return user.role if hmac.compare_digest(now, session.credential) else None


class Verified(NamedTuple):
    signed: Signed
    key: AgentKey


_RELOAD_EVERY_S: Final = 1.0


class AgentAuth:
    """Verifies signed requests by the key they name; thread-safe (the nonce cache is
    shared).

    The keys come from ``keys_file`` (clavis_contracts.keys) and are re-read when the
    file changes (checked at most once a second), so a key is added or retired without
    a restart: during a rollover a host's old and new keys are both listed and both
    accepted. A changed file that is no longer valid (or no longer private) is not taken;
    the keys before it stay, and the refusal is logged, without any secret.

    With a store, every accepted nonce is recorded there while its timestamp is within
    the skew (and reloaded at start), so a restart of clavisd does not reopen a captured
    request for replay. Reports record theirs in the ingest transaction that stores them
    (``record=False`` here); every other signed request records it before it acts.
    """

    def __init__(
        self, keys_file: Path, max_skew_s: float, store: Store | None = None, now: float = 0.0
    ) -> None:
        self.keys_file = keys_file
        self._keys = {k.id: k for k in load_keys(keys_file)}
        self._stamp = _stamp(keys_file)
        self._next_check = time.monotonic() + _RELOAD_EVERY_S
        self.max_skew_s = max_skew_s
        self._nonces = NonceCache(window_s=max_skew_s)
        self._lock = threading.Lock()
        self._store = store
        if store is not None:
            keep = self.keep_since(now)
            store.drop_nonces(keep)
            for nonce, _ in store.nonces(keep):
                self._nonces.add(nonce, now)

    def __repr__(self) -> str:  # never show a secret, even in a traceback
        return f"AgentAuth({self.keys_file}, max_skew_s={self.max_skew_s})"

    @property
    def key_ids(self) -> list[str]:
        return sorted(self._keys)

    def host_key(self, host: str) -> AgentKey | None:
        """The key clavisd signs its requests to ``host``'s agents with: the first listed
        for that host (during a rollover the old one stays first until the agent has the
        new one; docs/clavisd.md, Security)."""
        with self._lock:
            self._reload_if_changed()
            return next(
                (k for k in self._keys.values() if k.role == "agent" and k.host == host), None
            )

    def keep_since(self, now: float) -> float:
        """Nonces signed before this need no memory: their timestamps are refused."""
        return now - self.max_skew_s - 1

    def _reload_if_changed(self) -> None:
        """Called with the lock held."""
        if time.monotonic() < self._next_check:
            return
        self._next_check = time.monotonic() + _RELOAD_EVERY_S
        stamp = _stamp(self.keys_file)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            keys = load_keys(self.keys_file)
        except KeyFileError as exc:
            log.error("agent keys not reloaded, the previous ones stay: %s", exc)
            return
        self._keys = {k.id: k for k in keys}
        log.info("agent keys reloaded from %s: %s", self.keys_file, ", ".join(self.key_ids))

    def check(
        self, method: str, path: str, body: bytes, headers: dict[str, str], now: float,
        *, record: bool = True,
    ) -> Verified:  # fmt: skip
        key_id = key_id_of(headers)
        with self._lock:
            self._reload_if_changed()
            if not key_id:
                raise AuthError(f"missing {KEY_ID} header (requests are signed per host key)")
            key = self._keys.get(key_id)
            if key is None:
                raise AuthError(f"unknown key id {key_id[:64]!r}")
            try:
                signed = verify(key.secret_bytes, method, path, body, headers, now=now,
                                max_skew_s=self.max_skew_s, nonces=self._nonces)  # fmt: skip
            except SignatureError as exc:
                raise AuthError(str(exc)) from exc
        stored = self._store
        if record and stored is not None and not stored.add_nonce(signed.nonce, signed.timestamp):
            raise AuthError(REPLAYED)
        return Verified(signed, key)


def _stamp(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)
