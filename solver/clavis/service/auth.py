"""Who may call clavisd: agents by HMAC-signed requests, people by login and role.

Agents (monitors, migrators) share one secret read from a root-only file; the request
signing itself lives in ``clavis_contracts.signing`` so agents import it without the
solver. UI users log in with a password (scrypt hashes in the config) and get a bearer
token; the ``admin`` role may change weights and apply plans, ``viewer`` only reads.
The secret and passwords never reach a log line or an error message.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from clavis_contracts.signing import (
    REPLAYED,
    NonceCache,
    SignatureError,
    Signed,
    read_secret,
    verify,
)

if TYPE_CHECKING:
    from clavis.service.config import User
    from clavis.service.store import Session, Store

Role = Literal["admin", "viewer"]
_SCRYPT_N: Final = 2**14
_SCRYPT_R: Final = 8
_SCRYPT_P: Final = 1


class AuthError(Exception):
    """Authentication failed; the message is safe to return to the caller."""


class SecretFileError(Exception):
    """The shared secret file is missing, open to group or others, owned by another user
    than root when root reads it, or too short."""


def load_secret(path: Path) -> bytes:
    try:
        st = path.stat()
        data = path.read_bytes()
    except OSError as exc:
        raise SecretFileError(f"{path}: cannot read the shared secret: {exc.strerror}") from exc
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretFileError(
            f"{path}: the shared secret must be readable by its owner only (chmod 600); "
            f"its mode is {stat.S_IMODE(st.st_mode):04o}"
        )
    if os.geteuid() == 0 and st.st_uid != 0:
        # Root must not trust a secret another user can rewrite (its owner can chmod it).
        raise SecretFileError(
            f"{path}: the shared secret must be owned by root (chown root), not uid {st.st_uid}"
        )
    try:
        return read_secret(data)
    except ValueError as exc:
        raise SecretFileError(f"{path}: {exc}") from exc


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


class AgentAuth:
    """Verifies signed agent requests; thread-safe (the nonce cache is shared).

    With a store, every accepted nonce is recorded there while its timestamp is within
    the skew (and reloaded at start), so a restart of clavisd does not reopen a captured
    request for replay. Reports record theirs in the ingest transaction that stores them
    (``record=False`` here); every other signed request records it before it acts.
    """

    def __init__(
        self, secret: bytes, max_skew_s: float, store: Store | None = None, now: float = 0.0
    ) -> None:
        self._secret = secret
        self.max_skew_s = max_skew_s
        self._nonces = NonceCache(window_s=max_skew_s)
        self._lock = threading.Lock()
        self._store = store
        if store is not None:
            keep = self.keep_since(now)
            store.drop_nonces(keep)
            for nonce, _ in store.nonces(keep):
                self._nonces.add(nonce, now)

    def __repr__(self) -> str:  # never show the secret, even in a traceback
        return f"AgentAuth(max_skew_s={self.max_skew_s})"

    @property
    def secret(self) -> bytes:
        return self._secret

    def keep_since(self, now: float) -> float:
        """Nonces signed before this need no memory: their timestamps are refused."""
        return now - self.max_skew_s - 1

    def check(
        self, method: str, path: str, body: bytes, headers: dict[str, str], now: float,
        *, record: bool = True,
    ) -> Signed:  # fmt: skip
        with self._lock:
            try:
                signed = verify(self._secret, method, path, body, headers, now=now,
                                max_skew_s=self.max_skew_s, nonces=self._nonces)  # fmt: skip
            except SignatureError as exc:
                raise AuthError(str(exc)) from exc
        stored = self._store
        if record and stored is not None and not stored.add_nonce(signed.nonce, signed.timestamp):
            raise AuthError(REPLAYED)
        return signed
