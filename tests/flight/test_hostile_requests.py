"""Hostile reads against a real `quiver serve`: names, descriptors, filters, tickets,
ListFlights and Handshake, generated with hypothesis. Every answer is a coded one-line
error (or a correct success), nothing leaks, and the process keeps serving."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import campaign as hostile
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from campaign import (
    FILTERS,
    JSON_SCALARS,
    JSON_VALUES,
    TRANSPORT,
    Campaign,
    Served,
    base_table,
    examples,
    is_valid_name,
    no_leak_marker,
)
from google.protobuf import any_pb2
from hypothesis import given
from hypothesis import strategies as st

from quiver.flight_server.actions import ACTIONS
from quiver.flight_server.sql.front import SQL_ACTIONS
from quiver.flight_server.sql.messages import SQL_TYPE_PREFIX, pack, sql
from quiver.flight_server.tickets import TICKET_KIND, ReadTicket, Signer
from quiver.format.dataset import write_dataset
from quiver.wire.requests import READ_KEYS

served, campaign, sent = hostile.served, hostile.campaign, hostile.sent  # fixtures
READ_ERRORS = {"invalid_argument", "not_found"}


def cmd(doc: Any) -> fl.FlightDescriptor:
    return fl.FlightDescriptor.for_command(doc if isinstance(doc, bytes) else json.dumps(doc))


ORIGINAL = {r["id"]: r for r in base_table().to_pylist()}


def rows_of_base(got: pa.Table) -> None:
    """Every row read is a row `base` was written with, unchanged in the columns read (a
    read of appended rows sees rows deleted since)."""
    assert got.num_rows <= len(ORIGINAL)
    if "id" not in got.column_names:
        return
    by_id = ORIGINAL
    for row in got.to_pylist():
        assert row["id"] in by_id, row
        want = by_id[row["id"]]
        assert all(row[k] == want[k] for k in row if k in want and row[k] == row[k]), row


# -- names ----------------------------------------------------------------------------------
NAME_PIECES = [*"aZ09_.-/", "..", "%2e", "\\", " ", "\x00", "\t", "é", "😀", "\u202e", ":", "*"]
NAMES = st.one_of(
    st.lists(st.sampled_from(NAME_PIECES), max_size=12).map("".join),
    st.text(max_size=24),
    st.integers(240, 262).map(lambda n: "a" * n),
    st.integers(1, 20).map(lambda n: "/".join(["d"] * n)),
    st.integers(1015, 1030).map(lambda n: ("ab/" * n)[:n].strip("/")),
    st.sampled_from(["..", "../x", "a/../../x", "x.lance/y", "/abs", "a//b", "", "nul\x00"]),
).filter(no_leak_marker)


@examples(120)
@given(name=NAMES)
def test_dataset_names(sent: Campaign, name: str) -> None:
    c = sent
    before = c.files()
    valid = is_valid_name(name)
    codes = {"not_found"} if valid else {"invalid_argument"}
    c.send(f"GetFlightInfo CMD {name!r}", lambda: c.read(cmd({"dataset": name})), codes)
    c.send(f"GetSchema CMD {name!r}", lambda: c.client.get_schema(cmd({"dataset": name})), codes)
    path = (
        fl.FlightDescriptor.for_path(*name.split("/")) if name else fl.FlightDescriptor.for_path()
    )
    c.send(f"GetFlightInfo PATH {name!r}", lambda: c.client.get_flight_info(path), codes)
    c.send(f"describe {name!r}", lambda: c.action("describe", {"dataset": name}), codes)
    if not valid:  # valid names would create datasets: only refusals are sent
        one = pa.table({"a": [1]})
        c.send(f"DoPut create {name!r}", lambda: c.put(cmd({"dataset": name}), one), codes)
        c.send(f"drop_dataset {name!r}", lambda: c.action("drop_dataset", {"dataset": name}), codes)
        assert c.files() == before
    c.alive()


# -- descriptors ----------------------------------------------------------------------------
PLAUSIBLE = {
    "dataset": st.sampled_from(["base", "missing", "../base", 7]),
    "version": st.one_of(st.integers(-3, 5), st.sampled_from([2**63, 2**64, "1", 1.5])),
    "columns": st.lists(st.sampled_from(["id", "s", "v", "nope", "_rowid", "id"]), max_size=4),
    "limit": st.one_of(st.integers(-2, 100), st.sampled_from([2**63, 2**70])),
    "max_rows_per_endpoint": st.one_of(st.integers(-1, 30), st.just(2**64)),
    "appended_since": st.integers(-1, 4),
    "as_of": st.sampled_from(["2020-01-01T00:00:00Z", "yesterday", "9999-12-31T23:59:59Z", ""]),
    "with_row_id": st.one_of(st.booleans(), st.just("yes")),
}
RAW_BODIES = [
    b'{"dataset": "base", "limit": 1e999}',
    b'{"dataset": "base", "limit": NaN}',
    b'{"dataset": "base", "limit": -Infinity}',
    b'{"dataset": "base", "limit": ' + b"9" * 5000 + b"}",
    b'{"dataset": "base", "filter": "\\ud800 > 1"}',
    b'{"dataset": "base", "tag": "\\udfff"}',
    b"[" * 5000 + b"]" * 5000,
    b'{"dataset": "base"' + b', "x": [' * 3000 + b"]" * 3000 + b"}",
    b"\xef\xbb\xbf{}",
    b'{"dataset": "base"}\x00',
]


@st.composite
def read_commands(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from([*READ_KEYS, "bogus"]), max_size=4, unique=True))
    doc: dict[str, Any] = {"dataset": draw(PLAUSIBLE["dataset"])}
    for k in keys:
        doc[k] = draw(st.one_of(PLAUSIBLE.get(k, JSON_VALUES), JSON_VALUES))
    return doc


def read_and_check(c: Campaign, label: str, descriptor: fl.FlightDescriptor) -> None:
    """GetSchema, GetFlightInfo and every DoGet of one descriptor, each a checked input."""
    codes = READ_ERRORS | {"failed_precondition", "unimplemented"}
    c.send(f"GetSchema {label}", lambda: c.client.get_schema(descriptor), codes, ok=True)
    info = c.send(
        f"GetFlightInfo {label}", lambda: c.client.get_flight_info(descriptor), codes, ok=True
    )
    for i, e in enumerate(info.endpoints if info is not None else []):
        got = c.send(
            f"DoGet {i} {label}", lambda e=e: c.client.do_get(e.ticket).read_all(), codes, ok=True
        )
        if got is not None:
            rows_of_base(got)


@examples(100)
@given(doc=read_commands())
def test_cmd_descriptors(sent: Campaign, doc: dict[str, Any]) -> None:
    read_and_check(sent, f"CMD {json.dumps(doc)}", cmd(doc))
    sent.alive()


@examples(25)
@given(raw=st.one_of(st.binary(max_size=40), st.sampled_from(RAW_BODIES)))
def test_raw_descriptor_bytes(sent: Campaign, raw: bytes) -> None:
    c = sent
    before = c.files()
    label = f"raw CMD {raw[:80]!r} ({len(raw)} bytes)"
    c.send(f"GetFlightInfo {label}", lambda: c.client.get_flight_info(cmd(raw)), READ_ERRORS)
    c.send(f"GetSchema {label}", lambda: c.client.get_schema(cmd(raw)), READ_ERRORS)
    c.send(f"DoPut {label}", lambda: c.put(cmd(raw), pa.table({"a": [1]})), READ_ERRORS)
    assert c.files() == before


def test_path_descriptors_the_transport_refuses(sent: Campaign) -> None:
    """PATH elements are protobuf strings: gRPC refuses invalid UTF-8 before Quiver runs
    (an INTERNAL status with an empty message, no code: nothing of ours to leak)."""
    c = sent
    before = c.files()
    for raw in (b"\xff\xfe", b"ba\xc3se", b"\xc0\xaf..", b"\xed\xa0\x80"):
        path = fl.FlightDescriptor.for_path(raw)
        c.send(
            f"GetFlightInfo PATH {raw!r}", lambda p=path: c.client.get_flight_info(p), {TRANSPORT}
        )
        c.send(f"GetSchema PATH {raw!r}", lambda p=path: c.client.get_schema(p), {TRANSPORT})
        c.send(f"DoPut PATH {raw!r}", lambda p=path: c.put(p, pa.table({"a": [1]})), {TRANSPORT})
    empty = fl.FlightDescriptor.for_path()
    c.send("GetFlightInfo PATH []", lambda: c.client.get_flight_info(empty), {"invalid_argument"})
    split = fl.FlightDescriptor.for_path("ba", "se")
    c.send("GetFlightInfo PATH [ba, se]", lambda: c.client.get_flight_info(split), {"not_found"})
    assert c.files() == before


# -- filters --------------------------------------------------------------------------------
@examples(150)
@given(filt=FILTERS)
def test_filters(sent: Campaign, filt: str) -> None:
    read_and_check(sent, f"filter {filt!r}", cmd({"dataset": "base", "filter": filt}))
    sent.alive()


def test_filters_that_fail_while_evaluating_and_oversized_ones(sent: Campaign) -> None:
    """Errors found only on the data (after the stream started) and filters past the size
    tickets allow: invalid_argument naming the filter or the limit."""
    c = sent
    for filt in ("id / 0 > 1", "CAST(n AS BIGINT) > 1", "CAST(s AS DOUBLE) > 0.5"):
        info = c.client.get_flight_info(cmd({"dataset": "base", "filter": filt}))
        for e in info.endpoints:  # planning succeeded: each stream fails on its data
            label = f"DoGet evaluating {filt!r} {e.ticket.ticket[-12:]!r}"
            c.send(label, lambda e=e: c.client.do_get(e.ticket).read_all(), {"invalid_argument"})
    huge_in = "id IN (" + ",".join(map(str, range(300_000))) + ")"
    huge_literal = "s = '" + "a" * 1_000_000 + "'"
    for filt in (huge_in, huge_literal):
        label = f"GetFlightInfo filter of {len(filt)} bytes"
        c.send(
            label,
            lambda f=filt: c.read(cmd({"dataset": "base", "filter": f})),
            {"invalid_argument"},
        )
        with pytest.raises(fl.FlightError, match="limited to 262144 bytes"):
            c.client.get_flight_info(cmd({"dataset": "base", "filter": filt}))


# -- tickets --------------------------------------------------------------------------------
def real_ticket(c: Campaign, doc: dict[str, Any] | None = None) -> bytes:
    info = c.client.get_flight_info(cmd(doc or {"dataset": "base"}))
    return info.endpoints[0].ticket.ticket


def forge(payload: dict[str, Any], key: bytes) -> bytes:
    return Signer(key).sign(TICKET_KIND, payload).encode()


HOSTILE_PAYLOAD_VALUES = {
    "d": st.one_of(st.sampled_from(["base", "missing", "../base", "", 5, None]), JSON_SCALARS),
    "v": st.one_of(st.integers(-2, 4), st.sampled_from([2**63, 2**64 + 1, "1", None, True])),
    "f": st.one_of(st.integers(-2, 5), st.sampled_from([2**32, 2**63, "0", 1.0])),
    "r": st.one_of(st.lists(st.integers(-5, 2**40), min_size=0, max_size=3), JSON_VALUES),
    "c": st.one_of(st.lists(st.sampled_from(["id", "s", "nope", "_rowid", "id"])), JSON_VALUES),
    "q": st.one_of(FILTERS, JSON_SCALARS),
    "l": st.one_of(st.integers(-5, 50), st.sampled_from([2**63, "1"])),
    "i": st.one_of(st.booleans(), st.sampled_from([1, "true", None])),
    "e": st.one_of(st.sampled_from([1, 0, -1, 2**63, None, "soon"]), st.integers(0, 10**9)),
    "t": st.one_of(st.integers(-5, 2**62), st.sampled_from([None, "x"])),
}


@st.composite
def forged_payloads(draw: st.DrawFn) -> dict[str, Any]:
    payload = {"d": "base", "v": 2, "f": None, "r": None, "c": None, "q": None, "l": None}
    payload.update({"i": False, "e": None, "t": None})
    for k in draw(st.lists(st.sampled_from(sorted(HOSTILE_PAYLOAD_VALUES)), min_size=1)):
        payload[k] = draw(HOSTILE_PAYLOAD_VALUES[k])
    for k in draw(st.lists(st.sampled_from([*payload, "zz"]), max_size=1)):
        if k in payload:
            del payload[k]
        else:
            payload[k] = 1
    return payload


@examples(120)
@given(payload=forged_payloads())
def test_signed_tickets_with_hostile_payloads(
    sent: Campaign, served: Served, payload: dict[str, Any]
) -> None:
    """Tickets signed with the server's key (a leaked key, a buggy replica) but carrying
    anything at all: refused with a code, or read correctly."""
    c = sent
    token = fl.Ticket(forge(payload, served.key))
    label = f"DoGet forged {json.dumps(payload, sort_keys=True)}"
    got = c.send(label, lambda: c.client.do_get(token).read_all(), READ_ERRORS, ok=True)
    if got is not None:
        assert payload.get("d") == "base"
        rows_of_base(got)
    c.alive()


@examples(50)
@given(
    how=st.sampled_from(["flip", "cut", "append", "random", "b64"]),
    where=st.integers(0, 10**6),
    junk=st.binary(min_size=1, max_size=40),
)
def test_altered_and_random_tickets(sent: Campaign, how: str, where: int, junk: bytes) -> None:
    c = sent
    t = real_ticket(c, {"dataset": "base", "columns": ["id", "s"]})
    i = where % len(t)
    if how == "flip":
        bad = t[:i] + bytes([t[i] ^ (junk[0] or 1)]) + t[i + 1 :]
    elif how == "cut":
        bad = t[:i]
    elif how == "append":
        bad = t + junk
    elif how == "random":
        bad = junk
    else:
        bad = b"qt1." + base64.urlsafe_b64encode(junk) + b"." + base64.urlsafe_b64encode(junk)
    assert bad != t
    label = f"DoGet altered ticket {how} {where} {junk!r}"
    c.send(label, lambda: c.client.do_get(fl.Ticket(bad)).read_all(), {"invalid_argument"})


def test_expired_oversized_and_foreign_tickets(sent: Campaign, served: Served) -> None:
    c = sent
    payload = {"d": "base", "v": 2, "f": None, "r": None, "c": None, "q": None, "l": None}
    payload.update({"i": False, "e": 1, "t": None})
    expired = fl.Ticket(forge(payload, served.key))
    c.send("DoGet expired", lambda: c.client.do_get(expired).read_all(), {"invalid_argument"})
    with pytest.raises(fl.FlightError, match="ticket expired"):
        c.client.do_get(expired).read_all()
    for size in (1 << 20, (1 << 20) + 1, 5 << 20):
        big = fl.Ticket(b"qt1." + b"A" * size + b".AAAA")
        c.send(
            f"DoGet ticket of {size} bytes",
            lambda b=big: c.client.do_get(b).read_all(),
            {"invalid_argument"},
        )
    with pytest.raises(fl.FlightError, match="over this service's limit of 1048576 bytes"):
        c.client.do_get(fl.Ticket(b"qt1." + b"A" * (2 << 20))).read_all()
    foreign = ReadTicket("base", 2).encode(Signer(b"another-key-another-key-another"))
    c.send(
        "DoGet foreign key",
        lambda: c.client.do_get(fl.Ticket(foreign)).read_all(),
        {"invalid_argument"},
    )
    staged = Signer(served.key).sign("qf1", payload).encode()
    c.send(
        "DoGet staged-fragment token",
        lambda: c.client.do_get(fl.Ticket(staged)).read_all(),
        {"invalid_argument"},
    )


# -- ListFlights, Handshake, ListActions, DoExchange ----------------------------------------
@examples(30)
@given(
    criteria=st.one_of(st.binary(max_size=12), st.sampled_from([b"b", b"base", b"\xff", b"../"]))
)
def test_list_flights_criteria(sent: Campaign, criteria: bytes) -> None:
    c = sent
    label = f"ListFlights {criteria!r}"
    infos = c.send(
        label, lambda: list(c.client.list_flights(criteria)), {"invalid_argument"}, ok=True
    )
    try:
        prefix = criteria.decode("utf-8")
    except UnicodeDecodeError:
        assert infos is None
        return
    names = [i.descriptor.path[0].decode() for i in infos]
    on_disk = sorted(p.name[: -len(".lance")] for p in c.root.glob("*.lance"))
    assert names == [n for n in on_disk if n.startswith(prefix)]


@examples(15)
@given(user=st.text(max_size=12).filter(no_leak_marker), password=st.text(max_size=12))
def test_handshake_without_authentication(sent: Campaign, user: str, password: str) -> None:
    """No auth file: Handshake is refused with a code; credentials sent on calls are ignored."""
    c = sent
    label = f"Handshake {user!r}/{password!r}"
    c.send(label, lambda: c.client.authenticate_basic_token(user, password), {"unimplemented"})
    header = (b"authorization", b"Bearer " + base64.b64encode(f"{user}:{password}".encode()))
    options = fl.FlightCallOptions(headers=[header])
    label = f"ListActions with {header!r}"
    actions = c.send(label, lambda: list(c.client.list_actions(options)), set(), ok=True)
    assert len(actions) == len(ACTIONS) + len(SQL_ACTIONS)


def test_do_exchange_is_refused_with_a_code(sent: Campaign) -> None:
    c = sent

    def exchange(descriptor: fl.FlightDescriptor) -> None:
        writer, reader = c.client.do_exchange(descriptor)
        writer.begin(pa.schema([("a", pa.int64())]))
        writer.done_writing()
        reader.read_all()

    for d in (fl.FlightDescriptor.for_path("base"), cmd(b"\xff")):
        c.send(f"DoExchange {d!r}", lambda d=d: exchange(d), {"unimplemented"})


def test_server_is_alive_after_every_group(served: Served, campaign: Campaign) -> None:
    campaign.healthy()
    assert Path(served.root, "base.lance").is_dir()


def test_endpoint_explosions_are_refused(sent: Campaign, served: Served) -> None:
    """A read cut into a million endpoints would hold a million tickets in memory."""
    c = sent
    write_dataset(
        pa.table({"id": pa.array(range(25_000), pa.int64())}), str(served.root / "tall.lance")
    )
    for extra in ({}, {"appended_since": 0}, {"columns": ["id"], "filter": "id > 3"}):
        doc = {"dataset": "tall", "max_rows_per_endpoint": 1, **extra}
        c.send(
            f"GetFlightInfo {doc}",
            lambda d=doc: c.client.get_flight_info(cmd(d)),
            {"invalid_argument"},
        )
        with pytest.raises(fl.FlightError, match="more than 20000 endpoints"):
            c.client.get_flight_info(cmd(doc))
    info = c.client.get_flight_info(cmd({"dataset": "tall", "max_rows_per_endpoint": 5_000}))
    assert [e.app_metadata for e in info.endpoints][-1] == json.dumps(
        {"version": 1, "fragment_id": 0, "row_range": [20_000, 25_000], "rows": 5_000},
        separators=(",", ":"),
    ).encode()


DEEP_FILTERS = [
    "(" * 20_000 + "id" + ")" * 20_000 + " > 1",
    "NOT " * 30_000 + "TRUE",
    "id" + " + 1" * 40_000 + " > 0",
    "abs(" * 20_000 + "id" + ")" * 20_000 + " > 0",
    "-" * 100_000 + "1 > 0",
    "s = " + "'" * 200_001,
]


def test_deeply_nested_filters(sent: Campaign) -> None:
    """Filters that would recurse past Python's stack (in a gRPC thread) or never end."""
    c = sent
    for filt in DEEP_FILTERS:
        doc = {"dataset": "base", "filter": filt}
        label = f"GetFlightInfo deep filter {filt[:30]!r} ({len(filt)} chars)"
        c.send(label, lambda d=doc: c.client.get_flight_info(cmd(d)), {"invalid_argument"})
        label = f"delete deep predicate {filt[:30]!r} ({len(filt)} chars)"
        body = {"dataset": "base", "predicate": filt}
        c.send(label, lambda b=body: c.action("delete", b), {"invalid_argument"})


# -- Flight SQL -----------------------------------------------------------------------------
SQL_PIECES = [
    *("SELECT", " * ", " FROM", " base", " nope", ' "base@v', "1", "0", '"', "'", "$1", "$0"),
    *("(", ")", ";", " WHERE", " id", " = ", " / ", "--", "\x00", "é", " UNION ALL", " JOIN"),
    *(" ORDER BY", " LIMIT", " -1", " 99999999999999999999", " GROUP BY", " count(*)", ","),
    *(" public.", " quiver.", ' "../x"', " CAST(", " AS INT)", " DELETE", " INSERT INTO"),
]
SQL_TEXT = st.one_of(
    st.lists(st.sampled_from(SQL_PIECES), max_size=14).map("".join), st.text(max_size=40)
)
SQL_KINDS = sorted(n for n in vars(sql) if n.startswith(("Command", "Ticket", "Action")))
SQL_REFUSALS = {"invalid_argument", "not_found", "unimplemented"}


def _packed(kind: str, value: bytes) -> bytes:
    return any_pb2.Any(type_url=SQL_TYPE_PREFIX + kind, value=value).SerializeToString()


@examples(60)
@given(
    query=SQL_TEXT.filter(no_leak_marker),
    kind=st.sampled_from(SQL_KINDS),
    junk=st.binary(max_size=32),
)
def test_flight_sql_statements_and_messages(
    sent: Campaign, query: str, kind: str, junk: bytes
) -> None:
    """Generated SQL and generated Flight SQL messages: an answer or a one-line refusal,
    never an internal error; nothing under the root changes."""
    c = sent
    before = c.files()
    q = cmd(pack(sql.CommandStatementQuery(query=query)))
    c.send(
        f"SQL GetFlightInfo {query!r}", lambda: c.client.get_flight_info(q), SQL_REFUSALS, ok=True
    )
    c.send(f"SQL GetSchema {query!r}", lambda: c.client.get_schema(q), SQL_REFUSALS, ok=True)
    prepare = fl.Action(
        "CreatePreparedStatement", pack(sql.ActionCreatePreparedStatementRequest(query=query))
    )
    c.send(
        f"SQL prepare {query!r}", lambda: list(c.client.do_action(prepare)), SQL_REFUSALS, ok=True
    )
    raw = _packed(kind, junk)
    label = f"SQL {kind} {junk!r}"
    c.send(
        f"{label} GetFlightInfo", lambda: c.client.get_flight_info(cmd(raw)), SQL_REFUSALS, ok=True
    )
    c.send(
        f"{label} DoGet", lambda: c.client.do_get(fl.Ticket(raw)).read_all(), SQL_REFUSALS, ok=True
    )
    for name in ("ClosePreparedStatement", "CancelFlightInfo", "CloseSession", "BeginTransaction"):
        action = fl.Action(name, raw if name != "CancelFlightInfo" else junk)
        c.send(
            f"{label} {name}", lambda a=action: list(c.client.do_action(a)), SQL_REFUSALS, ok=True
        )
    if kind != "CommandStatementIngest":  # (junk that decodes to a table name would create it)
        c.send(
            f"{label} DoPut", lambda: c.put(cmd(raw), pa.table({"a": [1]})), SQL_REFUSALS, ok=True
        )
    assert c.files() == before
    c.alive()
