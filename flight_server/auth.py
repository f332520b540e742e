"""Authentication (Basic → Bearer) and per-dataset rights for the Flight server.

The auth file is JSON (``--auth-file`` / ``QUIVER_AUTH_FILE``)::

    {
      "token_secret": "optional; share it between replicas so tokens work on all of them",
      "users": {
        "alice": {"password": "scrypt$16384$8$1$<salt>$<hash>", "read": ["*"], "write": ["team/*"]},
        "bob":   {"password": "scrypt$...", "read": ["sales", "team/*"]}
      }
    }

- ``password`` is a salted hash made by :func:`hash_password` (``quiver hash-password``):
  ``scrypt$N$r$p$salt$hash`` or ``pbkdf2_sha256$iterations$salt$hash`` (base64 salt and
  hash). Plain-text passwords are refused.
- ``api_keys`` (optional): hashes of long-lived API keys that stand for the user, made by
  ``quiver api-key`` (``sha256$<hex>``; the key itself is random, shown once and stored
  nowhere). A key is sent as ``authorization: Bearer <key>`` (or, to the REST namespace,
  ``x-api-key: <key>``) instead of a token.
- ``read`` / ``write`` are lists of glob patterns (``fnmatch``: ``*`` also matches ``/``,
  so ``team/*`` covers every dataset under ``team/``) matched against dataset names. Write
  does not imply read. Both default to ``[]``.
- Unknown keys are an error. The file is re-read when its modification time changes; a file
  that no longer parses is logged and the last good version stays in force.

Protocol: a call carrying ``authorization: Basic base64(user:password)`` (pyarrow's
``FlightClient.authenticate_basic_token`` sends it on a Handshake) is authenticated and
answers ``authorization: Bearer <token>`` in its response headers. Every later call sends
``authorization: Bearer <token>``; every call is checked. Tokens are random (a 128-bit
nonce), expire after the TTL (``--token-ttl``), and are signed with HMAC-SHA256 over the
user, the expiry, the nonce and the user's current password hash: changing a password or
removing a user revokes that user's tokens at once. Without ``token_secret`` the signing key
is random per process, so tokens do not survive a restart. Without an auth file there is no
authentication at all (loopback use): no middleware is installed and handlers see no identity.

No password, hash or token is ever logged or put in an error message.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.flight as flight

from quiver.flight_server.errors import PermissionDenied, make_flight_error

__all__ = [
    "AUTH_MIDDLEWARE_KEY",
    "READ",
    "WRITE",
    "AuthConfig",
    "AuthFileError",
    "AuthMiddleware",
    "AuthMiddlewareFactory",
    "Authenticator",
    "HandshakeAuthHandler",
    "Identity",
    "authorize",
    "hash_password",
    "identity_of",
    "load_auth_file",
    "verify_password",
]

log = logging.getLogger("quiver.auth")

AUTH_MIDDLEWARE_KEY = "auth"
READ = "read"
WRITE = "write"
RIGHTS = (READ, WRITE)

DEFAULT_TOKEN_TTL = 3600.0

_USER_RE = re.compile(r"^[A-Za-z0-9_.@+-]{1,128}$")
_SCRYPT_DEFAULTS = (2**14, 8, 1)
_PBKDF2_DEFAULT_ITERATIONS = 600_000
_TOKEN_PREFIX = "q1"
_API_KEY_HASH = re.compile(r"sha256\$[0-9a-f]{64}")


class AuthFileError(ValueError):
    """The auth file is missing, malformed or holds an invalid entry (never echoes secrets)."""


# --------------------------------------------------------------------------- passwords


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def hash_password(password: str, *, scheme: str = "scrypt") -> str:
    """A salted hash of ``password`` for the auth file (``scrypt`` or ``pbkdf2_sha256``)."""
    if not password:
        raise ValueError("the password is empty")
    salt = secrets.token_bytes(16)
    secret = password.encode("utf-8")
    if scheme == "scrypt":
        n, r, p = _SCRYPT_DEFAULTS
        digest = hashlib.scrypt(secret, salt=salt, n=n, r=r, p=p, dklen=32)
        return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(digest)}"
    if scheme == "pbkdf2_sha256":
        it = _PBKDF2_DEFAULT_ITERATIONS
        digest = hashlib.pbkdf2_hmac("sha256", secret, salt, it, dklen=32)
        return f"pbkdf2_sha256${it}${_b64(salt)}${_b64(digest)}"
    raise ValueError(f"unknown password hash scheme {scheme!r} (scrypt, pbkdf2_sha256)")


def _parse_hash(stored: str) -> tuple[str, tuple[int, ...], bytes, bytes]:
    """Split a stored hash into (scheme, parameters, salt, digest); ValueError if malformed."""
    parts = stored.split("$")
    try:
        if parts[0] == "scrypt" and len(parts) == 6:
            n, r, p = (int(x) for x in parts[1:4])
            if n < 2 or n & (n - 1) or not (1 <= r <= 64) or not (1 <= p <= 16) or n > 2**20:
                raise ValueError
            params: tuple[int, ...] = (n, r, p)
        elif parts[0] == "pbkdf2_sha256" and len(parts) == 4:
            params = (int(parts[1]),)
            if not (1 <= params[0] <= 10_000_000):
                raise ValueError
        else:
            raise ValueError
        salt, digest = _unb64(parts[-2]), _unb64(parts[-1])
    except (ValueError, binascii.Error):
        raise ValueError(
            "not a password hash (expected scrypt$N$r$p$salt$hash or "
            "pbkdf2_sha256$iterations$salt$hash; make one with `quiver hash-password`)"
        ) from None
    if len(salt) < 8 or len(digest) < 16:
        raise ValueError("password hash salt or digest too short")
    return parts[0], params, salt, digest


def verify_password(stored: str, password: str) -> bool:
    """Whether ``password`` matches the stored hash (constant-time comparison)."""
    scheme, params, salt, digest = _parse_hash(stored)
    secret = password.encode("utf-8")
    if scheme == "scrypt":
        n, r, p = params
        got = hashlib.scrypt(
            secret, salt=salt, n=n, r=r, p=p, dklen=len(digest), maxmem=256 * r * (n + p + 2)
        )
    else:
        got = hashlib.pbkdf2_hmac("sha256", secret, salt, params[0], dklen=len(digest))
    return hmac.compare_digest(got, digest)


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class UserEntry:
    name: str
    password_hash: str
    read: tuple[str, ...]
    write: tuple[str, ...]
    api_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Identity:
    """Who is calling, and what they may touch; ``context.get_middleware("auth").identity``."""

    user: str
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()

    def may(self, right: str, dataset: str) -> bool:
        """Whether this identity holds ``right`` ("read" or "write") on dataset ``dataset``."""
        if right not in RIGHTS:
            raise ValueError(f"unknown right {right!r}")
        patterns = self.read if right == READ else self.write
        return any(fnmatch.fnmatchcase(dataset, pat) for pat in patterns)


@dataclass(frozen=True)
class AuthConfig:
    users: Mapping[str, UserEntry]
    token_secret: bytes | None = None


def _patterns(user: str, key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise AuthFileError(f"user {user!r}: {key!r} must be a list of glob patterns")
    return tuple(value)


def parse_auth_config(data: Any) -> AuthConfig:
    """Validate the decoded JSON of an auth file."""
    if not isinstance(data, dict):
        raise AuthFileError("the auth file must hold a JSON object")
    unknown = set(data) - {"users", "token_secret"}
    if unknown:
        raise AuthFileError(f"unknown key(s) in the auth file: {sorted(unknown)}")
    users_raw = data.get("users")
    if not isinstance(users_raw, dict):
        raise AuthFileError('the auth file needs a "users" object')
    secret = data.get("token_secret")
    if secret is not None and (not isinstance(secret, str) or len(secret) < 16):
        raise AuthFileError('"token_secret" must be a string of at least 16 characters')
    users: dict[str, UserEntry] = {}
    for name, entry in users_raw.items():
        if not _USER_RE.match(name):
            raise AuthFileError(f"invalid user name {name!r} (letters, digits, _.@+-)")
        if not isinstance(entry, dict):
            raise AuthFileError(f"user {name!r}: entry must be an object")
        bad = set(entry) - {"password", "read", "write", "api_keys"}
        if bad:
            raise AuthFileError(f"user {name!r}: unknown key(s) {sorted(bad)}")
        pw = entry.get("password")
        if not isinstance(pw, str):
            raise AuthFileError(f"user {name!r}: missing password hash")
        try:
            _parse_hash(pw)
        except ValueError as e:
            raise AuthFileError(f"user {name!r}: {e}") from None
        keys = entry.get("api_keys") or []
        if not isinstance(keys, list) or not all(
            isinstance(k, str) and _API_KEY_HASH.fullmatch(k) for k in keys
        ):
            raise AuthFileError(
                f"user {name!r}: 'api_keys' must list sha256$<64 hex digits> hashes "
                "(quiver api-key)"
            )
        users[name] = UserEntry(
            name,
            pw,
            _patterns(name, "read", entry.get("read")),
            _patterns(name, "write", entry.get("write")),
            tuple(keys),
        )
    return AuthConfig(users, secret.encode("utf-8") if secret else None)


def load_auth_file(path: str | os.PathLike[str]) -> AuthConfig:
    """Read and validate the JSON auth file at ``path``."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        what = f"cannot read the auth file {os.fspath(path)!r}: {e.strerror}"
        raise AuthFileError(what) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        # The position, not the text: the file holds hashes.
        where = f"line {e.lineno}" if isinstance(e, json.JSONDecodeError) else "encoding"
        raise AuthFileError(f"the auth file is not valid JSON ({where})") from None
    return parse_auth_config(data)


# --------------------------------------------------------------------------- errors


def _unauthenticated(message: str) -> flight.FlightUnauthenticatedError:
    return make_flight_error("unauthenticated", message)  # type: ignore[return-value]


# --------------------------------------------------------------------------- authenticator


class Authenticator:
    """Checks credentials and tokens against an auth file (re-read when it changes)."""

    _dummy_hash: str | None = None  # verified for unknown users, so they take as long

    def __init__(
        self,
        source: str | os.PathLike[str] | AuthConfig,
        *,
        token_ttl: float = DEFAULT_TOKEN_TTL,
        clock: Any = time.time,
    ) -> None:
        if token_ttl <= 0:
            raise ValueError("the token TTL must be positive")
        self.token_ttl = float(token_ttl)
        self._clock = clock
        self._lock = threading.Lock()
        self._path: str | None = None
        self._mtime: int | None = None
        if isinstance(source, AuthConfig):
            self._config = source
        else:
            self._path = os.fspath(source)
            self._mtime = self._stat()
            self._config = load_auth_file(self._path)
        self._process_key = secrets.token_bytes(32)
        self._verified: dict[bytes, None] = {}  # HMACs of (user, hash, password) that verified

    # -- config
    def _stat(self) -> int | None:
        try:
            return os.stat(self._path).st_mtime_ns  # type: ignore[arg-type]
        except OSError:
            return None

    @property
    def config(self) -> AuthConfig:
        if self._path is not None:
            mtime = self._stat()
            if mtime is not None and mtime != self._mtime:
                with self._lock:
                    if mtime != self._mtime:
                        self._mtime = mtime
                        try:
                            self._config = load_auth_file(self._path)
                            log.info("auth file reloaded (%d users)", len(self._config.users))
                        except AuthFileError as e:
                            log.warning("auth file not reloaded, keeping the previous one: %s", e)
        return self._config

    @property
    def _signing_key(self) -> bytes:
        secret = self.config.token_secret
        if secret is None:
            return self._process_key
        return hashlib.sha256(b"quiver-token-key\0" + secret).digest()

    # -- passwords
    def check_password(self, user: str, password: str) -> Identity:
        """The identity of ``user`` if ``password`` is right, else FlightUnauthenticatedError."""
        entry = self.config.users.get(user)
        if entry is None and Authenticator._dummy_hash is None:
            Authenticator._dummy_hash = hash_password(secrets.token_urlsafe(16))
        stored = entry.password_hash if entry else Authenticator._dummy_hash
        memo = hmac.new(
            self._process_key,
            b"\0".join(s.encode("utf-8") for s in (user, stored, password)),
            hashlib.sha256,
        ).digest()
        ok = memo in self._verified
        if not ok:
            ok = verify_password(stored, password) and entry is not None
            if ok:
                with self._lock:
                    if len(self._verified) >= 1024:
                        self._verified.pop(next(iter(self._verified)))
                    self._verified[memo] = None
        if not ok or entry is None:
            # Only names from the auth file are logged: a password typed as the user name
            # must not end up in the log.
            who = repr(user) if entry is not None else "(an unknown user name)"
            log.info("authentication failed for user %s", who)
            raise _unauthenticated("invalid user name or password")
        return Identity(entry.name, entry.read, entry.write)

    # -- API keys
    def check_api_key(self, key: str) -> Identity:
        """The identity an API key stands for, else FlightUnauthenticatedError."""
        digest = api_key_hash(key)
        for entry in self.config.users.values():
            if any(hmac.compare_digest(digest, k) for k in entry.api_keys):
                return Identity(entry.name, entry.read, entry.write)
        log.info("authentication failed: unknown API key")
        raise _unauthenticated(
            "invalid bearer token (neither a token this server issued nor a known API key)"
        )

    # -- tokens
    def _mac(self, payload: bytes, entry: UserEntry) -> bytes:
        msg = payload + b"\0" + entry.password_hash.encode("utf-8")
        return hmac.new(self._signing_key, msg, hashlib.sha256).digest()

    def issue_token(self, identity: Identity) -> str:
        """A new bearer token for ``identity``, valid for the TTL."""
        entry = self.config.users[identity.user]
        expires = round(self._clock() + self.token_ttl, 3)
        nonce = secrets.token_urlsafe(16)
        payload = json.dumps({"u": entry.name, "e": expires, "n": nonce}, separators=(",", ":"))
        raw = payload.encode("utf-8")
        mac = self._mac(raw, entry)
        enc = base64.urlsafe_b64encode
        return f"{_TOKEN_PREFIX}.{enc(raw).decode()}.{enc(mac).decode()}"

    def check_token(self, token: str) -> Identity:
        """The identity a bearer token stands for, else FlightUnauthenticatedError."""
        try:
            prefix, body, mac_text = token.split(".")
            if prefix != _TOKEN_PREFIX:
                raise ValueError
            raw = base64.urlsafe_b64decode(body.encode("ascii"))
            mac = base64.urlsafe_b64decode(mac_text.encode("ascii"))
            claims = json.loads(raw)
            user, expires = claims["u"], claims["e"]
            if not isinstance(user, str) or not isinstance(expires, (int, float)):
                raise ValueError
        except (ValueError, KeyError, TypeError, UnicodeError, binascii.Error):
            raise _unauthenticated("invalid bearer token; authenticate again") from None
        entry = self.config.users.get(user)
        if entry is None or not hmac.compare_digest(mac, self._mac(raw, entry)):
            raise _unauthenticated("invalid bearer token; authenticate again")
        if self._clock() >= expires:
            raise _unauthenticated("bearer token expired; authenticate again")
        return Identity(entry.name, entry.read, entry.write)

    # -- headers
    def authenticate_headers(self, headers: Mapping[str, Any]) -> tuple[Identity, str | None]:
        """Check a call's ``authorization`` header: (identity, new token or None)."""
        values = headers.get("authorization") or []
        if isinstance(values, (str, bytes)):
            values = [values]
        if not values:
            raise _unauthenticated(
                "authentication required: send 'authorization: Basic <user:password>' "
                "(authenticate_basic_token) or 'authorization: Bearer <token>'"
            )
        if len(values) > 1:
            raise _unauthenticated("more than one authorization header")
        value = values[0]
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        scheme, _, credentials = value.strip().partition(" ")
        credentials = credentials.strip()
        if scheme.lower() == "bearer" and credentials:
            if not credentials.startswith(f"{_TOKEN_PREFIX}."):
                return self.check_api_key(credentials), None
            return self.check_token(credentials), None
        if scheme.lower() == "basic" and credentials:
            # Go's Flight client (ADBC's Flight SQL driver) leaves out the padding
            credentials += "=" * (-len(credentials) % 4)
            try:
                decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                raise _unauthenticated("malformed Basic credentials") from None
            user, sep, password = decoded.partition(":")
            if not sep:
                raise _unauthenticated("malformed Basic credentials (expected user:password)")
            identity = self.check_password(user, password)
            return identity, self.issue_token(identity)
        raise _unauthenticated("unsupported authorization scheme (use Basic or Bearer)")


# --------------------------------------------------------------------------- middleware


class AuthMiddleware(flight.ServerMiddleware):
    """Per-call: the caller's :class:`Identity`, and the bearer token to send back if any."""

    def __init__(self, identity: Identity, token: str | None = None) -> None:
        self.identity = identity
        self._token = token

    def sending_headers(self) -> dict[str, str] | None:
        if self._token is None:
            return None
        return {"authorization": f"Bearer {self._token}"}

    def call_completed(self, exception: BaseException | None) -> None:
        pass


class AuthMiddlewareFactory(flight.ServerMiddlewareFactory):
    """Authenticates every call (Basic → Bearer); install under the key ``"auth"``."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.authenticator = authenticator

    def start_call(self, info: flight.CallInfo, headers: Mapping[str, Any]) -> AuthMiddleware:
        identity, token = self.authenticator.authenticate_headers(headers)
        return AuthMiddleware(identity, token)


class HandshakeAuthHandler(flight.ServerAuthHandler):
    """Lets the Handshake RPC through so the middleware can answer it with a token.

    pyarrow refuses Handshake when no auth handler is installed; the real check is
    :class:`AuthMiddlewareFactory`, which runs on every call, the Handshake included.
    """

    def authenticate(self, outgoing: Any, incoming: Any) -> None:
        pass

    def is_valid(self, token: bytes) -> str:
        return ""


class NoAuthHandler(flight.ServerAuthHandler):
    """Answers the Handshake of a server without authentication with a coded error
    (pyarrow's own answer has no `extra_info`); every other call passes."""

    def authenticate(self, outgoing: Any, incoming: Any) -> None:
        raise make_flight_error(
            "unimplemented",
            "this server runs without authentication (no auth file): call it without a "
            "handshake or credentials",
        )

    def is_valid(self, token: bytes) -> str:
        return ""


# --------------------------------------------------------------------------- rights


def identity_of(context: flight.ServerCallContext) -> Identity | None:
    """The caller's identity, or None when the server runs without authentication."""
    middleware = context.get_middleware(AUTH_MIDDLEWARE_KEY)
    return middleware.identity if middleware is not None else None


def authorize(identity: Identity | None, dataset: str, right: str) -> None:
    """Raise ``PermissionDenied`` (Flight: FlightUnauthorizedError, code ``permission_denied``)
    unless ``identity`` holds ``right`` on ``dataset``.

    ``identity`` None means authentication is off: everything is allowed.
    """
    if identity is None:
        return
    if not identity.may(right, dataset):
        raise PermissionDenied(f"user {identity.user!r} may not {right} dataset {dataset!r}")


def readable(identity: Identity | None, datasets: Iterable[str]) -> list[str]:
    """The datasets of ``datasets`` that ``identity`` may read (all when auth is off)."""
    return [d for d in datasets if identity is None or identity.may(READ, d)]


# --------------------------------------------------------------------------- CLI helper


def api_key_hash(key: str) -> str:
    """What the auth file stores of an API key (keys are random: a plain hash suffices)."""
    return "sha256$" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_api_key() -> tuple[str, str]:
    """A fresh random API key and its hash for the auth file."""
    key = "qk_" + secrets.token_urlsafe(32)
    return key, api_key_hash(key)


def main(argv: list[str] | None = None) -> int:
    """``python -m flight_server.auth [--pbkdf2]``: read a password, print its hash."""
    import argparse
    import getpass
    import sys

    parser = argparse.ArgumentParser(prog="quiver hash-password")
    parser.add_argument("--pbkdf2", action="store_true", help="pbkdf2_sha256 instead of scrypt")
    args = parser.parse_args(argv)
    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            print("quiver: the passwords differ", file=sys.stderr)
            return 2
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        print("quiver: empty password", file=sys.stderr)
        return 2
    print(hash_password(password, scheme="pbkdf2_sha256" if args.pbkdf2 else "scrypt"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
