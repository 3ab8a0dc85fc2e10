"""HMAC-SHA256 request signing between clavisd and the node agents (stdlib only).

Every agent request, and every clavisd request to an agent, carries three headers:

    X-Clavis-Timestamp  unix seconds when it was signed
    X-Clavis-Nonce      16-64 hex characters, never reused
    X-Clavis-Signature  hex HMAC-SHA256 of the canonical string below, keyed by the
                        sender's key (clavis_contracts.keys: root-only key files)

    CLAVIS-HMAC-SHA256 \\n METHOD \\n PATH \\n TIMESTAMP \\n NONCE \\n hex SHA-256 of the body

A request signed with a per-host or admin key (clavis_contracts.keys) also carries

    X-Clavis-Key-Id     the id of the key, which the receiver looks its secret up by

and its canonical string has ``KEY-ID:<id>`` after the scheme's line, so the id cannot
be swapped for another one's without breaking the signature.

The receiver refuses a missing or wrong signature, a timestamp further than the allowed
skew from its clock, and a nonce it has seen within that window (a replay). Nonces older
than the window need not be remembered: their timestamps are refused anyway.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections import OrderedDict
from collections.abc import Mapping
from typing import Final, NamedTuple

SCHEME: Final = "CLAVIS-HMAC-SHA256"
TIMESTAMP: Final = "X-Clavis-Timestamp"
NONCE: Final = "X-Clavis-Nonce"
SIGNATURE: Final = "X-Clavis-Signature"
KEY_ID: Final = "X-Clavis-Key-Id"
_NONCE_RE: Final = re.compile(r"^[0-9a-f]{16,64}$")
_SIG_RE: Final = re.compile(r"^[0-9a-f]{64}$")
MIN_SECRET_BYTES: Final = 16
REPLAYED: Final = "nonce already used (replayed request)"


class SignatureError(Exception):
    """The request is not authentic; the message says why (never the secret)."""


def canonical(
    method: str, path: str, timestamp: str, nonce: str, body: bytes, *, key_id: str = ""
) -> bytes:
    digest = hashlib.sha256(body).hexdigest()
    head = (SCHEME, f"KEY-ID:{key_id}") if key_id else (SCHEME,)
    return "\n".join((*head, method.upper(), path, timestamp, nonce, digest)).encode()


def signature(secret: bytes, message: bytes) -> str:
    return hmac.new(secret, message, "sha256").hexdigest()


def sign(
    secret: bytes, method: str, path: str, body: bytes, now: float, *, key_id: str = ""
) -> dict[str, str]:
    """Headers that authenticate one request (a fresh nonce each call); with ``key_id``,
    signed as that key's (the header names it)."""
    ts = str(int(now))
    nonce = secrets.token_hex(16)
    headers = {
        TIMESTAMP: ts,
        NONCE: nonce,
        SIGNATURE: signature(secret, canonical(method, path, ts, nonce, body, key_id=key_id)),
    }
    if key_id:
        headers[KEY_ID] = key_id
    return headers


def key_id_of(headers: Mapping[str, str]) -> str:
    """The X-Clavis-Key-Id of a request's headers, or "" when it has none."""
    return next((v for k, v in headers.items() if k.lower() == KEY_ID.lower()), "")


def skew_of(timestamp: int, now: float) -> float:
    """How far a request signed in the whole second ``timestamp`` is from ``now``.

    sign() truncates to whole seconds, so the request was signed somewhere in
    [timestamp, timestamp + 1): the skew is the distance to the nearest instant of that
    second (0 inside it). Comparing with ``timestamp`` itself would add up to a second of
    rounding, and a 1 s limit would refuse genuine requests at random.
    """
    if now < timestamp:
        return now - timestamp
    return max(0.0, now - (timestamp + 1))


class Signed(NamedTuple):
    """What a verified request was signed with (a receiver may persist the nonce)."""

    timestamp: int
    nonce: str


class NonceCache:
    """Nonces seen within the skew window, bounded in size (oldest dropped first)."""

    def __init__(self, window_s: float, max_entries: int = 1_000_000) -> None:
        self.window_s = window_s
        self.max_entries = max_entries
        self._seen: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, nonce: str, now: float) -> bool:
        """Remember ``nonce``; False if it was already seen (a replay)."""
        while self._seen:
            oldest, t = next(iter(self._seen.items()))
            if now - t <= 2 * self.window_s and len(self._seen) < self.max_entries:
                break
            del self._seen[oldest]
        if nonce in self._seen:
            return False
        self._seen[nonce] = now
        return True


def verify(
    secret: bytes,
    method: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    now: float,
    max_skew_s: float,
    nonces: NonceCache,
    not_before: float = 0.0,
) -> Signed:
    """Raise :class:`SignatureError` unless the request is authentic and fresh.

    ``nonces`` holds what this receiver saw; one that restarts must reload it (clavisd
    keeps its nonces in its store) or pass ``not_before`` = its start time, which refuses
    requests signed before it (weaker: a sender whose clock runs ahead is still replayable
    for that lead).
    """
    lower = {k.lower(): v for k, v in headers.items()}
    ts, nonce, sig = (lower.get(h.lower()) for h in (TIMESTAMP, NONCE, SIGNATURE))
    if ts is None or nonce is None or sig is None:
        raise SignatureError(f"missing {TIMESTAMP}, {NONCE} or {SIGNATURE} header")
    if not ts.isdigit() or len(ts) > 12:
        raise SignatureError(f"{TIMESTAMP} must be unix seconds")
    if not _NONCE_RE.match(nonce):
        raise SignatureError(f"{NONCE} must be 16-64 lowercase hex characters")
    if not _SIG_RE.match(sig):
        raise SignatureError(f"{SIGNATURE} must be 64 lowercase hex characters")
    key_id = lower.get(KEY_ID.lower(), "")
    expected = signature(secret, canonical(method, path, ts, nonce, body, key_id=key_id))
    if not hmac.compare_digest(expected, sig):
        raise SignatureError("signature does not match")
    skew = skew_of(int(ts), now)
    if abs(skew) > max_skew_s:
        raise SignatureError(f"timestamp is {skew:+.1f} s from this clock (limit {max_skew_s:g} s)")
    if int(ts) < int(not_before):
        raise SignatureError("request was signed before this service started; sign it again")
    if not nonces.add(nonce, now):
        raise SignatureError(REPLAYED)
    return Signed(int(ts), nonce)


def read_secret(text: bytes) -> bytes:
    """The secret from a secret file's bytes: surrounding whitespace stripped, long enough."""
    secret = text.strip()
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"secret must be at least {MIN_SECRET_BYTES} bytes")
    return secret
