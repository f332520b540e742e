"""Unit tests of flight_server.auth: password hashes, the auth file, tokens, the middleware."""

from __future__ import annotations

import base64
import json
import logging
import os
import time

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from flight_helpers import error_code

from quiver.flight_server.auth import (
    AUTH_MIDDLEWARE_KEY,
    AuthConfig,
    Authenticator,
    AuthFileError,
    AuthMiddlewareFactory,
    HandshakeAuthHandler,
    Identity,
    authorize,
    hash_password,
    identity_of,
    load_auth_file,
    main,
    parse_auth_config,
    readable,
    verify_password,
)
from quiver.flight_server.errors import PermissionDenied, to_flight_error
from quiver.flight_server.grpc_status import StatusError
from quiver.wire import status as wire_status

ALICE_PW = "correct horse battery staple"
BOB_PW = "s3cret-bob"


@pytest.fixture(scope="module")
def hashes() -> dict[str, str]:
    return {"alice": hash_password(ALICE_PW), "bob": hash_password(BOB_PW, scheme="pbkdf2_sha256")}


def _auth_json(hashes: dict[str, str], **extra) -> dict:
    return {
        "users": {
            "alice": {"password": hashes["alice"], "read": ["*"], "write": ["team/*"]},
            "bob": {"password": hashes["bob"], "read": ["sales", "team/*"]},
        },
        **extra,
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _basic(user: str, password: str) -> dict[str, list[str]]:
    creds = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"authorization": [f"Basic {creds}"]}


def _code(err: BaseException) -> str:
    """The code of an error raised in-process (a StatusError) or received by a client."""
    return err.code if isinstance(err, StatusError) else error_code(err)


# --------------------------------------------------------------------------- hashes


def test_hash_and_verify_both_schemes() -> None:
    for scheme in ("scrypt", "pbkdf2_sha256"):
        h = hash_password("pw", scheme=scheme)
        assert h.startswith(scheme + "$")
        assert verify_password(h, "pw")
        assert not verify_password(h, "pW")
        assert hash_password("pw", scheme=scheme) != h  # salted


def test_malformed_hashes_are_refused() -> None:
    for bad in ("plain-text", "scrypt$3$8$1$AAAA$AAAA", "md5$x$y", "scrypt$16384$8$1$!!$!!"):
        with pytest.raises(ValueError):
            verify_password(bad, "x")
    with pytest.raises(ValueError):
        hash_password("")
    with pytest.raises(ValueError):
        hash_password("x", scheme="md5")


def test_hash_password_cli(monkeypatch, capsys) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("hunter22\n"))
    assert main([]) == 0
    out = capsys.readouterr().out.strip()
    assert verify_password(out, "hunter22") and "hunter22" not in out


# --------------------------------------------------------------------------- auth file


def test_auth_file_parses(tmp_path, hashes) -> None:
    path = tmp_path / "auth.json"
    path.write_text(json.dumps(_auth_json(hashes)))
    cfg = load_auth_file(path)
    assert set(cfg.users) == {"alice", "bob"}
    assert cfg.users["bob"].write == () and cfg.users["alice"].write == ("team/*",)
    assert cfg.token_secret is None


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(extra=1), "unknown key"),
        (lambda d: d.pop("users"), '"users"'),
        (lambda d: d["users"]["alice"].update(admin=True), "unknown key"),
        (lambda d: d["users"]["alice"].update(read=5), "glob patterns"),
        (lambda d: d["users"].update({"bad name": d["users"]["bob"]}), "invalid user name"),
        (lambda d: d.update(token_secret="short"), "token_secret"),
    ],
)
def test_auth_file_errors(hashes, mutate, message) -> None:
    data = _auth_json(hashes)
    mutate(data)
    with pytest.raises(AuthFileError, match=message):
        parse_auth_config(data)


def test_plain_text_password_is_refused_without_echo(hashes) -> None:
    data = _auth_json(hashes)
    data["users"]["alice"]["password"] = "MyPlainTextPassword"
    with pytest.raises(AuthFileError) as info:
        parse_auth_config(data)
    assert "MyPlainTextPassword" not in str(info.value)
    assert "alice" in str(info.value) and "hash-password" in str(info.value)


def test_bad_json_does_not_echo_content(tmp_path) -> None:
    path = tmp_path / "auth.json"
    path.write_text('{"users": {"a": {"password": "scrypt$SECRETSTUFF"')
    with pytest.raises(AuthFileError) as info:
        load_auth_file(path)
    assert "SECRETSTUFF" not in str(info.value)
    with pytest.raises(AuthFileError, match="cannot read"):
        load_auth_file(tmp_path / "missing.json")


# --------------------------------------------------------------------------- rights


def test_identity_globs() -> None:
    ident = Identity("alice", read=("*",), write=("team/*", "sales"))
    assert ident.may("read", "anything/at/all")
    assert ident.may("write", "team/x") and ident.may("write", "team/x/y")
    assert ident.may("write", "sales") and not ident.may("write", "sales2")
    assert not ident.may("write", "teamx")
    with pytest.raises(ValueError):
        ident.may("admin", "x")
    nobody = Identity("nobody")
    assert not nobody.may("read", "x") and not nobody.may("write", "x")


def test_authorize_and_readable() -> None:
    bob = Identity("bob", read=("sales",))
    authorize(bob, "sales", "read")
    authorize(None, "anything", "write")  # auth off
    with pytest.raises(PermissionDenied) as info:
        authorize(bob, "sales", "write")
    error = to_flight_error(info.value)
    assert isinstance(error, StatusError) and error.grpc_code == wire_status.PERMISSION_DENIED
    assert _code(error) == "permission_denied"
    assert "bob" in str(error) and "write" in str(error) and "sales" in str(error)
    assert readable(bob, ["sales", "other", "team/x"]) == ["sales"]
    assert readable(None, ["a", "b"]) == ["a", "b"]


# --------------------------------------------------------------------------- tokens


def test_basic_gives_a_token_that_authenticates(hashes) -> None:
    auth = Authenticator(parse_auth_config(_auth_json(hashes)))
    ident, token = auth.authenticate_headers(_basic("alice", ALICE_PW))
    assert ident.user == "alice" and token
    again, new = auth.authenticate_headers({"authorization": [f"Bearer {token}"]})
    assert again == ident and new is None
    _, token2 = auth.authenticate_headers(_basic("alice", ALICE_PW))  # cached verification
    assert token2 != token  # random
    assert ALICE_PW not in token and hashes["alice"] not in token


@pytest.mark.parametrize(
    "headers, message",
    [
        ({}, "authentication required"),
        ({"authorization": []}, "authentication required"),
        ({"authorization": ["Bearer nonsense"]}, "invalid bearer token"),
        ({"authorization": ["Bearer q1.e30=.AAAA"]}, "invalid bearer token"),
        ({"authorization": ["Basic !!!"]}, "malformed Basic"),
        ({"authorization": ["Basic " + base64.b64encode(b"nocolon").decode()]}, "malformed"),
        ({"authorization": ["Digest abc"]}, "unsupported"),
        ({"authorization": ["Bearer a", "Bearer b"]}, "more than one"),
    ],
)
def test_bad_headers(hashes, headers, message) -> None:
    auth = Authenticator(parse_auth_config(_auth_json(hashes)))
    with pytest.raises(StatusError, match=message) as info:
        auth.authenticate_headers(headers)
    assert _code(info.value) == "unauthenticated"


def test_wrong_password_and_unknown_user_look_the_same(hashes, caplog) -> None:
    auth = Authenticator(parse_auth_config(_auth_json(hashes)))
    messages = []
    with caplog.at_level(logging.DEBUG, logger="quiver"):
        for user, pw in (("alice", "wrong-pass-1"), ("mallory", "wrong-pass-2"), ("alice", "")):
            with pytest.raises(StatusError) as info:
                auth.authenticate_headers(_basic(user, pw))
            messages.append(str(info.value).split(". Detail")[0])
    assert len(set(messages)) == 1
    assert "mallory" not in caplog.text and "'alice'" in caplog.text
    assert "wrong-pass" not in caplog.text and "wrong-pass" not in "".join(messages)


def test_token_expiry(hashes) -> None:
    clock = Clock()
    auth = Authenticator(parse_auth_config(_auth_json(hashes)), token_ttl=60, clock=clock)
    _, token = auth.authenticate_headers(_basic("bob", BOB_PW))
    clock.now += 59
    assert auth.check_token(token).user == "bob"
    clock.now += 2
    with pytest.raises(StatusError, match="expired"):
        auth.check_token(token)
    with pytest.raises(ValueError):
        Authenticator(AuthConfig({}), token_ttl=0)


def test_tampered_token_is_refused(hashes) -> None:
    auth = Authenticator(parse_auth_config(_auth_json(hashes)))
    token = auth.issue_token(Identity("bob"))
    prefix, body, mac = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body))
    claims["u"] = "alice"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode()
    with pytest.raises(StatusError):
        auth.check_token(f"{prefix}.{forged}.{mac}")
    claims["u"], claims["e"] = "bob", claims["e"] + 10**6
    longer = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode()
    with pytest.raises(StatusError):
        auth.check_token(f"{prefix}.{longer}.{mac}")


def test_tokens_of_another_process_need_the_shared_secret(hashes) -> None:
    cfg = parse_auth_config(_auth_json(hashes))
    token = Authenticator(cfg).issue_token(Identity("alice"))
    with pytest.raises(StatusError):
        Authenticator(cfg).check_token(token)  # random per-process key
    shared = parse_auth_config(_auth_json(hashes, token_secret="x" * 32))
    token = Authenticator(shared).issue_token(Identity("alice"))
    assert Authenticator(shared).check_token(token).user == "alice"  # a replica


def test_reload_revokes_and_keeps_last_good(tmp_path, hashes, caplog) -> None:
    path = tmp_path / "auth.json"
    path.write_text(json.dumps(_auth_json(hashes)))
    auth = Authenticator(path)
    token_a = auth.issue_token(Identity("alice"))
    token_b = auth.issue_token(Identity("bob"))

    data = _auth_json(hashes)
    data["users"]["alice"]["password"] = hash_password("new password")
    del data["users"]["bob"]
    path.write_text(json.dumps(data))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    for token in (token_a, token_b):  # password changed / user removed
        with pytest.raises(StatusError):
            auth.check_token(token)
    assert auth.check_password("alice", "new password").user == "alice"

    path.write_text("{not json")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    with caplog.at_level(logging.WARNING, logger="quiver"):
        assert auth.check_password("alice", "new password").user == "alice"
    assert "not reloaded" in caplog.text


# --------------------------------------------------------------------------- over Flight


class EchoIdentityServer(flight.FlightServerBase):
    """Answers DoAction("whoami") with the caller's identity; "write:<ds>" checks a right."""

    def do_action(self, context, action):
        ident = identity_of(context)
        if action.type == "whoami":
            yield json.dumps({"user": ident.user if ident else None}).encode()
        elif action.type.startswith("write:"):
            try:
                authorize(ident, action.type[6:], "write")
            except PermissionDenied as e:
                raise to_flight_error(e) from None
            yield b"ok"

    def do_get(self, context, ticket):
        return flight.RecordBatchStream(pa.table({"x": [1, 2, 3]}))


@pytest.fixture()
def auth_server(hashes):
    auth = Authenticator(parse_auth_config(_auth_json(hashes)))
    server = EchoIdentityServer(
        ("127.0.0.1", 0),
        auth_handler=HandshakeAuthHandler(),
        middleware={AUTH_MIDDLEWARE_KEY: AuthMiddlewareFactory(auth)},
    )
    yield server
    server.shutdown()


def test_over_flight(auth_server) -> None:
    client = flight.connect(f"grpc://127.0.0.1:{auth_server.port}")
    with pytest.raises(flight.FlightUnauthenticatedError) as info:
        list(client.do_action(flight.Action("whoami", b"")))
    assert _code(info.value) == "unauthenticated"
    with pytest.raises(flight.FlightUnauthenticatedError) as info:
        client.do_get(flight.Ticket(b"x")).read_all()
    assert _code(info.value) == "unauthenticated"
    with pytest.raises(flight.FlightUnauthenticatedError) as info:
        client.authenticate_basic_token("alice", "nope")
    assert "nope" not in str(info.value)

    header = client.authenticate_basic_token("alice", ALICE_PW)
    assert header[0] == b"authorization" and header[1].startswith(b"Bearer ")
    opts = flight.FlightCallOptions(headers=[header])
    [res] = client.do_action(flight.Action("whoami", b""), options=opts)
    assert json.loads(res.body.to_pybytes()) == {"user": "alice"}
    assert client.do_get(flight.Ticket(b"x"), options=opts).read_all().num_rows == 3
    [ok] = client.do_action(flight.Action("write:team/a", b""), options=opts)
    assert ok.body.to_pybytes() == b"ok"
    with pytest.raises(flight.FlightUnauthorizedError) as info:
        list(client.do_action(flight.Action("write:sales", b""), options=opts))
    assert _code(info.value) == "permission_denied"
    token = header[1].decode().split(" ", 1)[1]
    assert token not in str(info.value)

    # Basic on an ordinary call works too, and answers a token.
    basic = _basic("bob", BOB_PW)["authorization"][0].encode()
    [res] = client.do_action(
        flight.Action("whoami", b""),
        options=flight.FlightCallOptions(headers=[(b"authorization", basic)]),
    )
    assert json.loads(res.body.to_pybytes()) == {"user": "bob"}
