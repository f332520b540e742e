"""Unit tests of the server's parts: names, tickets, config, errors, the CLI process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pyarrow.flight as fl
import pytest

from quiver.flight_server import grpc_status
from quiver.flight_server.config import DEFAULT_MEMORY_BUDGET, ConfigError, ServerConfig
from quiver.flight_server.errors import InvalidArgument, Scrubber, to_flight_error
from quiver.flight_server.names import dataset_uri, discover, name_from_path, validate_name
from quiver.flight_server.tickets import FRAGMENT_KIND, ReadTicket, Signer
from quiver.format.errors import CommitConflictError, DatasetNotFoundError
from quiver.wire import status as wire_status


@pytest.mark.parametrize(
    "good", ["sales", "team/sales", "a.b-c_d", "A/B/C/0", "x.lance", "..a", "a..", "v1.0"]
)
def test_valid_names(good: str) -> None:
    assert validate_name(good) == good


@pytest.mark.parametrize(
    "bad",
    [
        "",
        ".",
        "..",
        "a/..",
        "../a",
        "a/./b",
        "/a",
        "a/",
        "a//b",
        "%2e%2e",
        "a%2Fb",
        "a\x00b",
        "a\\b",
        "a b",
        "é",
        "a.lance/b",
        "x" * 300,
        "/".join(["a"] * 20),
        None,
        5,
    ],
)
def test_invalid_names(bad: object) -> None:
    with pytest.raises(InvalidArgument) as e:
        validate_name(bad)
    assert "\n" not in str(e.value)


def test_name_from_path_and_uri(tmp_path) -> None:
    assert name_from_path([b"team", b"sales"]) == "team/sales"
    assert name_from_path(["team/sales"]) == "team/sales"
    with pytest.raises(InvalidArgument):
        name_from_path([b"team", b".."])
    with pytest.raises(InvalidArgument):
        name_from_path([b"\xff"])
    with pytest.raises(InvalidArgument):
        name_from_path([])
    assert dataset_uri("memory://r", "a/b") == "memory://r/a/b.lance"
    assert dataset_uri(str(tmp_path), "a") == f"{tmp_path}/a.lance"


def test_discover_finds_nested_datasets_only(tmp_path) -> None:
    for d in ("a.lance/_versions", "ns/b.lance/_versions", "ns/deeper/c.lance/_versions"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "not_a_dataset.lance").mkdir()  # no _versions
    (tmp_path / "bad name.lance/_versions").mkdir(parents=True)
    (tmp_path / "a.lance/inner.lance/_versions").mkdir(parents=True)  # inside a dataset
    assert [f.name for f in discover(str(tmp_path))] == ["a", "ns/b", "ns/deeper/c"]
    assert [f.name for f in discover(str(tmp_path), prefix="ns/d")] == ["ns/deeper/c"]
    assert discover(str(tmp_path / "missing")) == []


def test_tickets_round_trip_and_resist_tampering() -> None:
    signer = Signer(b"k" * 32)
    t = ReadTicket("team/s", 7, 3, (10, 20), ("a", "b"), "a > 1", 5, True, None, 123)
    raw = t.encode(signer)
    assert ReadTicket.decode(signer, raw) == t
    assert ReadTicket.decode(Signer(b"k" * 32), raw) == t  # same key: another replica
    for bad in (raw[:-1], raw + b"x", raw.replace(b"qt1", b"qf1"), b"", b"a.b.c"):
        with pytest.raises(InvalidArgument):
            ReadTicket.decode(signer, bad)
    with pytest.raises(InvalidArgument):
        ReadTicket.decode(Signer(b"j" * 32), raw)
    # every single-byte change is caught
    for i in range(0, len(raw), 7):
        flipped = raw[:i] + bytes([raw[i] ^ 1]) + raw[i + 1 :]
        with pytest.raises(InvalidArgument):
            ReadTicket.decode(signer, flipped)
    # a fragment token is not a ticket, and vice versa
    token = signer.sign(FRAGMENT_KIND, {"d": "x"})
    with pytest.raises(InvalidArgument):
        ReadTicket.decode(signer, token.encode())
    with pytest.raises(InvalidArgument):
        signer.verify(FRAGMENT_KIND, raw)
    expired = ReadTicket("s", 1, expires=100).encode(signer)
    with pytest.raises(InvalidArgument, match="expired"):
        ReadTicket.decode(signer, expired, now=101)
    assert ReadTicket.decode(signer, expired, now=99).version == 1
    with pytest.raises(ValueError):
        Signer(b"short")
    assert "k" * 16 not in repr(signer)


def test_config_from_flags_env_and_defaults(tmp_path) -> None:
    c = ServerConfig.from_args([], env={})
    assert (c.root, c.host, c.port, c.max_rows_per_endpoint) == ("./data", "127.0.0.1", 8815, None)
    assert c.advertised() == ["grpc://127.0.0.1:8815"]
    env = {
        "QUIVER_ROOT": "memory://x",
        "QUIVER_PORT": "9000",
        "QUIVER_HOST": "0.0.0.0",
        "QUIVER_ADVERTISE": "grpc://a:1, grpc://b:2",
        "QUIVER_MAX_ROWS_PER_ENDPOINT": "1000",
        "QUIVER_TICKET_KEY": "0123456789abcdef-shared",
        "QUIVER_AUTH_FILE": "/etc/quiver/auth.json",
        "QUIVER_STORAGE_OPTIONS": '{"anon": true}',
    }
    c = ServerConfig.from_args([], env=env)
    assert c.root == "memory://x" and c.port == 9000 and c.host == "0.0.0.0"
    assert c.advertised(1) == ["grpc://a:1", "grpc://b:2"]
    assert c.max_rows_per_endpoint == 1000 and c.ticket_key == b"0123456789abcdef-shared"
    assert c.auth_file == "/etc/quiver/auth.json" and c.storage_options == {"anon": True}
    assert "0123456789abcdef" not in repr(c)
    c = ServerConfig.from_args(
        ["--port", "0", "--root", str(tmp_path), "--advertise", "grpc://z:3"], env=env
    )
    assert c.port == 0 and c.root == str(tmp_path) and c.advertise == ("grpc://z:3",)
    key = tmp_path / "key"
    key.write_bytes(b"from-a-file-0123456789\n")
    c = ServerConfig.from_args(["--ticket-key-file", str(key)], env={})
    assert c.ticket_key == b"from-a-file-0123456789"
    c = ServerConfig.from_args(["--tls-cert", "c.pem", "--tls-key", "k.pem"], env={})
    assert c.scheme == "grpc+tls" and c.advertised() == ["grpc+tls://127.0.0.1:8815"]
    assert ServerConfig(host="::1", port=5).advertised() == ["grpc://[::1]:5"]


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("0", 0),
        ("1048576", 1048576),
        ("96MiB", 96 * 2**20),
        ("96mib", 96 * 2**20),
        ("256M", 256 * 2**20),
        ("256Mi", 256 * 2**20),
        ("1G", 2**30),
        ("1GiB", 2**30),
        ("1.5 GiB", 3 * 2**29),
        ("512MB", 512 * 10**6),
        ("4kB", 4000),
        ("2K", 2048),
        ("1TB", 10**12),
        ("7B", 7),
    ],
)
def test_config_memory_budget_sizes(text: str, nbytes: int) -> None:
    assert ServerConfig.from_args(["--memory-budget", text], env={}).memory_budget == nbytes
    assert ServerConfig.from_args([], env={"QUIVER_MEMORY_BUDGET": text}).memory_budget == nbytes


def test_config_memory_budget_default_and_precedence() -> None:
    assert ServerConfig.from_args([], env={}).memory_budget == DEFAULT_MEMORY_BUDGET == 104 * 2**20
    env = {"QUIVER_MEMORY_BUDGET": "1G"}
    assert ServerConfig.from_args(["--memory-budget", "32MiB"], env=env).memory_budget == 2**25
    with pytest.raises(ConfigError, match="--memory-budget must be >= 0"):
        ServerConfig(memory_budget=-1)


@pytest.mark.parametrize("bad", ["", " ", "lots", "-1", "1X", "MB", "1e6", "1 2", "96MiBs", "nan"])
def test_config_refuses_bad_memory_budgets(bad: str) -> None:
    for argv, env in ((["--memory-budget", bad], {}), ([], {"QUIVER_MEMORY_BUDGET": bad})):
        if not bad and not argv:
            continue  # an empty variable means "not set"
        with pytest.raises(ConfigError) as e:
            ServerConfig.from_args(argv, env=env)
        message = str(e.value)
        assert "--memory-budget / QUIVER_MEMORY_BUDGET must be a size" in message
        assert "\n" not in message


@pytest.mark.parametrize(
    "argv",
    [
        ["--port", "x"],
        ["--port", "70000"],
        ["--max-rows-per-endpoint", "0"],
        ["--advertise", "http://a:1"],
        ["--tls-cert", "c.pem"],
        ["--tls-client-ca", "ca.pem"],
        ["--tls-cert", "c", "--tls-key", "k", "--advertise", "grpc://a:1"],
        ["--ticket-key-file", "/nonexistent/key"],
    ],
)
def test_config_refuses_bad_values(argv: list[str]) -> None:
    with pytest.raises(ConfigError) as e:
        ServerConfig.from_args(argv, env={})
    assert "\n" not in str(e.value)


def test_error_translation_table() -> None:
    def sent(e: Exception) -> tuple[int, dict]:
        found = wire_status.decode(e.extra_info)  # type: ignore[attr-defined]
        assert found is not None and found.grpc_code == e.grpc_code  # type: ignore[attr-defined]
        return e.grpc_code, found.details  # type: ignore[attr-defined]

    assert grpc_status.install()  # the C helper sets every status below
    e = to_flight_error(DatasetNotFoundError("no Lance dataset at /srv/data/x.lance"))
    assert isinstance(e, grpc_status.StatusError)
    assert sent(e) == (wire_status.NOT_FOUND, {"code": "not_found"})
    assert "/srv" not in str(e)
    e = to_flight_error(CommitConflictError("lost", version=9, retryable=True))
    assert sent(e) == (
        wire_status.UNAVAILABLE,
        {"code": "commit_conflict", "retryable": True, "version": 9},
    )
    e = to_flight_error(CommitConflictError("lost", version=3, retryable=False))
    assert sent(e)[0] == wire_status.INVALID_ARGUMENT and sent(e)[1]["retryable"] is False
    e = to_flight_error(KeyError("secret"))
    assert sent(e)[0] == wire_status.INTERNAL and "secret" not in str(e)
    scrub = Scrubber([("/srv/data/x.lance", "x"), ("/srv/data", "<root>")])
    assert scrub("at /srv/data/x.lance/data/f.lance:\nbad") == "at x/data/f.lance: bad"
    assert scrub("s3://bucket/key and /home/u/file") == "<path> and <path>"
    assert scrub("x / 2 and a/b") == "x / 2 and a/b"


def _serve(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "quiver.flight_server", *args],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_cli_serves_until_sigterm(tmp_path) -> None:
    proc = _serve(["--port", "0"], env={"QUIVER_ROOT": str(tmp_path)})
    try:
        line = ""
        deadline = time.time() + 30
        while "quiver: serving" not in line:
            assert time.time() < deadline and proc.poll() is None, line
            line = proc.stderr.readline()
        uri = re.search(r" at (grpc://[^\s,]+)", line).group(1)
        with fl.connect(uri) as client:
            result = list(client.do_action(fl.Action("healthcheck", b"{}")))
            assert json.loads(result[0].body.to_pybytes()) == {"status": "serving"}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_refuses_bad_config_with_one_line(tmp_path) -> None:
    proc = _serve(["serve", "--root", str(tmp_path), "--port", "nope"])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert err.strip().splitlines() == [err.strip()] and "--port" in err


def test_cli_demo_and_inspect(tmp_path) -> None:
    run = [sys.executable, "-m", "quiver.flight_server"]
    subprocess.run([*run, "demo", "--root", str(tmp_path)], check=True, timeout=60)
    out = subprocess.run(
        [*run, "inspect", str(tmp_path / "demo.lance")],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    info = json.loads(out)
    assert info["rows"] == 5000 and len(info["fragments"]) == 5
