"""Bad input of every kind: each answer is one line with a JSON code, no traceback, no path."""

from __future__ import annotations

import base64
import json
import os

import flight_helpers
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_helpers import (
    Served,
    assert_clean_error,
    files_under,
    start,
    table,
)

from quiver.format.dataset import write_dataset

served = flight_helpers.served  # fixtures shared by the server test modules
name = flight_helpers.name


BAD_NAMES = [
    "..",
    "../escape",
    "a/../../escape",
    ".",
    "./a",
    "/abs",
    "trailing/",
    "a//b",
    "%2e%2e",
    "%2e%2e/escape",
    "a%2Fb",
    "nul\x00byte",
    "back\\slash",
    "..\\escape",
    "",
    "spa ce",
    "ünïcode",
    "outer.lance/inner",
    "x" * 2000,
]


@pytest.fixture(scope="module")
def ds(served: Served) -> str:
    write_dataset(table(100), served.path("errs"), mode="create", max_rows_per_file=50)
    return "errs"


def cmd(doc: object) -> fl.FlightDescriptor:
    return fl.FlightDescriptor.for_command(json.dumps(doc))


def raw(data: bytes) -> fl.FlightDescriptor:
    return fl.FlightDescriptor.for_command(data)


def expect(served: Served, code: str, fn, *args) -> str:
    with pytest.raises((fl.FlightError, pa.ArrowException)) as e:
        result = fn(*args)
        if isinstance(result, fl.FlightStreamReader):
            result.read_all()
    return assert_clean_error(e.value, code, served.root)


def test_bad_dataset_names_are_refused_before_storage(served: Served) -> None:
    before = files_under(served.root.parent)
    c = served.client
    for bad in BAD_NAMES:
        expect(served, "invalid_argument", c.get_flight_info, cmd({"dataset": bad}))
        expect(served, "invalid_argument", c.get_schema, cmd({"dataset": bad}))
        for action in ("describe", "drop_dataset", "delete", "list_tags"):
            expect(served, "invalid_argument", served.action, action, {"dataset": bad})
        if "\x00" not in bad and bad:
            expect(served, "invalid_argument", c.get_flight_info, fl.FlightDescriptor.for_path(bad))
        with pytest.raises(fl.FlightError) as e:
            served.put(bad, table(3), mode="create")
        assert_clean_error(e.value, "invalid_argument", served.root)
    assert files_under(served.root.parent) == before
    assert not os.path.exists(served.root.parent / "escape.lance")


def test_unknown_dataset_version_tag(served: Served, ds: str) -> None:
    c = served.client
    for descriptor in (
        fl.FlightDescriptor.for_path("missing"),
        cmd({"dataset": "missing"}),
        cmd({"dataset": "no/such/thing", "version": 1}),
    ):
        message = expect(served, "not_found", c.get_flight_info, descriptor)
        assert "does not exist" in message
        expect(served, "not_found", c.get_schema, descriptor)
    expect(served, "not_found", c.get_flight_info, cmd({"dataset": ds, "version": 99}))
    message = expect(served, "not_found", c.get_flight_info, cmd({"dataset": ds, "tag": "nope"}))
    assert "nope" in message
    expect(
        served,
        "not_found",
        c.get_flight_info,
        cmd({"dataset": ds, "as_of": "1999-01-01T00:00:00Z"}),
    )
    for action, body in (
        ("describe", {"dataset": "missing"}),
        ("list_versions", {"dataset": "missing"}),
        ("delete", {"dataset": "missing", "predicate": "id = 1"}),
        ("restore", {"dataset": ds, "version": 42}),
        ("restore", {"dataset": ds, "tag": "nope"}),
        ("delete_tag", {"dataset": ds, "tag": "nope"}),
        ("drop_dataset", {"dataset": "missing"}),
    ):
        expect(served, "not_found", served.action, action, body)


def test_malformed_json_and_unknown_keys(served: Served, ds: str) -> None:
    c = served.client
    bodies = [
        b"{",
        b"not json",
        b"[1, 2]",
        b'"errs"',
        b"\xff\xfe",
        b'{"dataset": "errs", "dataset": "errs"}',
        b'{"dataset": "errs", "limit": NaN}',
        json.dumps({"dataset": ds, "colums": ["id"]}).encode(),
        json.dumps({"dataset": ds, "version": 1, "tag": "x"}).encode(),
        json.dumps({"dataset": ds, "limit": -1}).encode(),
        json.dumps({"dataset": ds, "limit": True}).encode(),
        json.dumps({"dataset": ds, "version": "1"}).encode(),
        json.dumps({"dataset": ds, "columns": "id"}).encode(),
        json.dumps({"dataset": ds, "columns": ["id", "id"]}).encode(),
        json.dumps({"dataset": ds, "with_row_id": "yes"}).encode(),
        json.dumps({"dataset": 5}).encode(),
        json.dumps({}).encode(),
        b"",
    ]
    for body in bodies:
        expect(served, "invalid_argument", c.get_flight_info, raw(body))
        expect(served, "invalid_argument", c.get_schema, raw(body))
    message = expect(served, "invalid_argument", c.get_flight_info, raw(bodies[7]))
    assert "colums" in message
    for action in ("describe", "list_versions", "commit", "delete", "compact", "cleanup"):
        for body in (b"{", b"[]", b"", json.dumps({"dataset": ds, "bogus": 1}).encode()):
            expect(served, "invalid_argument", served.action, action, body)
    expect(served, "invalid_argument", served.action, "healthcheck", {"bogus": 1})
    expect(
        served,
        "invalid_argument",
        served.action,
        "alter_columns",
        {"dataset": ds, "alterations": [{"path": "id", "rename": "x"}]},
    )
    for doc in ({"dataset": ds, "mode": "upsert"}, {"dataset": ds, "extra": 1}, {"mode": "append"}):
        with pytest.raises(fl.FlightError) as e:
            served.put(doc, table(2))
        assert_clean_error(e.value, "invalid_argument", served.root)


def test_filter_errors(served: Served, ds: str) -> None:
    c = served.client
    for filt, word in (("id >", "filter"), ("nope > 1", "nope"), ("id = 'abc'", "filter")):
        for fn in (c.get_flight_info, c.get_schema):
            message = expect(served, "invalid_argument", fn, cmd({"dataset": ds, "filter": filt}))
            assert word in message
    expect(served, "invalid_argument", c.get_flight_info, cmd({"dataset": ds, "columns": ["nope"]}))
    expect(
        served, "invalid_argument", served.action, "delete", {"dataset": ds, "predicate": "id >"}
    )


def test_tampered_and_truncated_tickets(served: Served, ds: str) -> None:
    info = served.info(ds)
    ticket = info.endpoints[0].ticket.ticket
    kind, body, mac = ticket.decode().split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload["f"] = info.endpoints[1].ticket.ticket and 1 - payload["f"]
    other_body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    bad = [
        b"",
        b"garbage",
        ticket[:-1],
        ticket[: len(ticket) // 2],
        ticket + b"A",
        f"{kind}.{other_body}.{mac}".encode(),  # another fragment, old signature
        f"{kind}.{body}.{mac[::-1]}".encode(),
        f"qf1.{body}.{mac}".encode(),
        ticket.replace(b".", b"", 1),
        b"\xff" * 40,
    ]
    for t in bad:
        message = expect(served, "invalid_argument", served.client.do_get, fl.Ticket(t))
        assert "ticket" in message
    # a server with another key refuses this server's tickets
    other, _ = start(served.root, ticket_key=b"another-key-another-key-another")
    try:
        with fl.connect(other.locations[0]) as client:
            with pytest.raises(fl.FlightError) as e:
                client.do_get(info.endpoints[0].ticket).read_all()
            assert_clean_error(e.value, "invalid_argument", served.root)
    finally:
        other.shutdown()


def test_unknown_action_and_unsupported_rpcs(served: Served) -> None:
    message = expect(served, "unimplemented", served.action, "nope", {})
    assert "nope" in message
    with pytest.raises(fl.FlightError) as e:
        writer, reader = served.client.do_exchange(fl.FlightDescriptor.for_path("x"))
        writer.begin(pa.schema([("a", pa.int64())]))
        writer.done_writing()
        reader.read_all()
    assert_clean_error(e.value, "unimplemented", served.root)


def test_unexpected_errors_leak_nothing(served: Served, ds: str, monkeypatch) -> None:
    service = served.server.service

    def boom(*args, **kwargs):
        raise RuntimeError(f"boom at {served.root}/secret.lance with key=hunter2\nline two")

    monkeypatch.setattr(service, "plan_scan", boom)
    message = expect(
        served, "internal", served.client.get_flight_info, fl.FlightDescriptor.for_path(ds)
    )
    assert "hunter2" not in message and "secret" not in message
    assert "reference" in message


def test_engine_messages_lose_server_paths(served: Served, ds: str) -> None:
    # the engine names the dataset by its URI; clients see the dataset name instead
    message = expect(
        served,
        "invalid_argument",
        served.client.get_flight_info,
        cmd({"dataset": ds, "filter": "zz = 1"}),
    )
    assert ds in message and str(served.root) not in message


def test_do_put_of_a_bad_descriptor(served: Served) -> None:
    for doc in (b"{", b"[]", json.dumps({"dataset": "../x"}).encode()):
        with pytest.raises(fl.FlightError) as e:
            from flight_helpers import do_put

            do_put(served.client, raw(doc), table(2))
        assert_clean_error(e.value, "invalid_argument", served.root)
