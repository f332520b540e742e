"""Hostile writes against a real `quiver serve`: DoPut with generated schemas and Arrow
data, every action with generated JSON bodies, and the examples of issue 12. Refusals carry
a code, leak nothing and write nothing; the process keeps serving `base` unchanged."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
from pathlib import Path
from typing import Any

import campaign as hostile
import lance
import numpy as np
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from campaign import (
    FILTERS,
    JSON_SCALARS,
    JSON_VALUES,
    Campaign,
    Served,
    examples,
    no_leak_marker,
)
from hypothesis import given
from hypothesis import strategies as st
from strategies import random_array

from quiver.flight_server.tickets import ReadTicket, Signer
from quiver.format.dataset import write_dataset

served, campaign, sent = hostile.served, hostile.campaign, hostile.sent  # fixtures

# What a write may answer besides success: never internal, never a transport error.
WRITE_ERRORS = {
    "invalid_argument",
    "not_found",
    "already_exists",
    "failed_precondition",
    "commit_conflict",
    "unimplemented",
}
REFUSED = {"invalid_argument"}
SCRATCH = "scratch"
_fresh = itertools.count()


def cmd(doc: Any) -> fl.FlightDescriptor:
    return fl.FlightDescriptor.for_command(doc if isinstance(doc, bytes) else json.dumps(doc))


def small_table(n: int = 6) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()), "s": [f"r{i}" for i in range(n)]})


def ensure_scratch(c: Campaign) -> None:
    """The dataset mutating inputs aim at (never `base`), created again when dropped."""
    try:
        c.action("describe", {"dataset": SCRATCH})
    except fl.FlightError:
        c.put(cmd({"dataset": SCRATCH, "mode": "create"}), small_table())


def refused_leaves_no_trace(
    c: Campaign, label: str, call: Any, codes: set[str], *, ok: bool = True
) -> Any:
    """Send a write; when refused, the root's files must be exactly as before."""
    before = c.files()
    result = c.send(label, call, codes, ok=ok)
    if result is None:
        assert c.files() == before, f"{label[:200]}: a refused write left files"
    return result


# -- DoPut: schemas and data --------------------------------------------------------------
LEAF_TYPES = [
    pa.null(),
    pa.bool_(),
    pa.int8(),
    pa.uint64(),
    pa.int64(),
    pa.float16(),
    pa.float64(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.binary(0),
    pa.binary(3),
    pa.date32(),
    pa.date64(),
    pa.timestamp("ns", "UTC"),
    pa.time64("ns"),
    pa.duration("us"),
    pa.decimal128(5, 2),
    pa.decimal256(40, 3),
    pa.month_day_nano_interval(),
    pa.string_view(),
    pa.binary_view(),
    pa.dictionary(pa.int8(), pa.string()),
]
FIELD_NAMES = st.one_of(
    st.sampled_from(["a", "b", "id", "_rowid", "_rowaddr", "_rowoffset", "a.b", "", " ", "é"]),
    st.text(max_size=8).filter(no_leak_marker),
)


def _nested(inner: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    return st.one_of(
        inner.map(pa.list_),
        inner.map(pa.large_list),
        st.tuples(inner, st.integers(0, 3)).map(lambda t: pa.list_(t[0], t[1])),
        st.lists(st.tuples(FIELD_NAMES, inner), max_size=3).map(pa.struct),
        inner.map(lambda t: pa.map_(pa.string(), t)),
        st.lists(inner, min_size=1, max_size=2).map(
            lambda ts: pa.sparse_union([pa.field(f"u{i}", t) for i, t in enumerate(ts)])
        ),
    )


ARROW_TYPES = st.recursive(st.sampled_from(LEAF_TYPES), _nested, max_leaves=4)


@st.composite
def hostile_tables(draw: st.DrawFn) -> pa.Table:
    """Tables of any shape: odd names, duplicates, every type, nulls in non-null fields."""
    n = draw(st.sampled_from([0, 1, 2, 5, 6, 300, 5000]))  # larger ones pick other encodings
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    columns, fields = [], []
    for _ in range(draw(st.integers(0, 4))):
        t = draw(ARROW_TYPES)
        try:
            arr = random_array(t, n, rng, 0.3)
        except (AssertionError, pa.ArrowException, TypeError, ValueError, OverflowError):
            arr = pa.nulls(n, t)
        if len(arr) != n or not arr.type.equals(t):  # a type random_array does not know
            arr = pa.nulls(n, t)
        columns.append(arr)
        nullable = pa.types.is_null(t) or draw(st.booleans())
        fields.append(pa.field(draw(FIELD_NAMES), t, nullable=nullable))
    try:
        return pa.Table.from_arrays(columns, schema=pa.schema(fields))
    except pa.ArrowException:  # pyarrow itself refuses (nulls in a non-null field...)
        return pa.Table.from_arrays(columns, names=[f.name for f in fields])


def digest(data: pa.Table) -> str:
    """A short fingerprint of a table's IPC bytes, to name an input."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_table(data)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()[:16]


@examples(120)
@given(data=hostile_tables(), mode=st.sampled_from(["create", "append", "overwrite"]))
def test_do_put_of_generated_schemas_and_data(sent: Campaign, data: pa.Table, mode: str) -> None:
    """Creates of new datasets, appends to and overwrites of `scratch`."""
    c = sent
    name = f"put{next(_fresh)}" if mode == "create" else SCRATCH
    ensure_scratch(c)
    label = f"DoPut {mode} {data.schema} rows={data.num_rows} {digest(data)}"
    codes = {"invalid_argument", "unimplemented"}
    call = lambda: c.put(cmd({"dataset": name, "mode": mode}), data)  # noqa: E731
    result = refused_leaves_no_trace(c, label, call, codes)
    if result is None:
        assert name == SCRATCH or not (c.root / f"{name}.lance").exists()
    elif mode != "append":
        got = c.read(fl.FlightDescriptor.for_path(name))
        assert got.num_rows == data.num_rows and got.column_names == data.column_names
        if got.schema.equals(data.schema):
            assert got.equals(data.combine_chunks()), label
    c.alive()


def test_do_put_of_data_that_is_not_valid_arrow(sent: Campaign) -> None:
    """Buffers a client can send that pyarrow's own checks let through (invalid UTF-8)."""
    c = sent
    offsets = pa.py_buffer(np.array([0, 2, 3], np.int32).tobytes())
    for raw in (b"\xff\xfe\x80", b"ab\xc0", b"\xed\xa0\x80"):
        bad = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(raw)])
        for mode in ("create", "append"):
            name = SCRATCH if mode == "append" else f"bad_utf8_{next(_fresh)}"
            ensure_scratch(c)
            data = pa.table({"id": pa.array([1, 2], pa.int64()), "s": bad})
            label = f"DoPut {mode} invalid UTF-8 {raw!r}"
            before = c.files()
            c.send(
                label, lambda n=name, d=data: c.put(cmd({"dataset": n}), d), {"invalid_argument"}
            )
            assert c.files() == before


# -- every action, generated bodies -------------------------------------------------------
ACTION_KEYS = {
    "commit": ["dataset", "operation", "fragments", "read_version", "idempotency_key", "job"],
    "abort": ["dataset", "fragments", "job"],
    "describe": ["dataset", "version", "tag", "as_of"],
    "list_versions": ["dataset"],
    "delete": ["dataset", "predicate"],
    "restore": ["dataset", "version", "tag"],
    "create_tag": ["dataset", "tag", "version"],
    "delete_tag": ["dataset", "tag"],
    "list_tags": ["dataset"],
    "add_columns": ["dataset", "columns"],
    "drop_columns": ["dataset", "columns"],
    "alter_columns": ["dataset", "alterations"],
    "compact": [
        "dataset",
        "target_rows_per_fragment",
        "max_rows_per_group",
        "materialize_deletions",
        "materialize_deletions_threshold",
    ],
    "cleanup": [
        "dataset",
        "older_than_seconds",
        "retain_versions",
        "delete_unverified",
        "error_if_tagged_old_versions",
    ],
    "drop_dataset": ["dataset"],
    "healthcheck": [],
}
INTS = st.one_of(st.integers(-2, 8), st.sampled_from([2**31, 2**63, 2**64, 10**30]))
COLUMN_NAMES = st.one_of(
    st.sampled_from(["id", "s", "new", "_rowid", "_rowaddr", "a.b", "", "x" * 300]),
    st.text(max_size=6).filter(no_leak_marker),
)
ALTERATIONS = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"path": COLUMN_NAMES},
            optional={
                "name": COLUMN_NAMES,
                "nullable": st.one_of(st.booleans(), JSON_SCALARS),
                "data_type": st.sampled_from(["int32", "utf8", "float64", "bogus", "list"]),
            },
        ),
        JSON_VALUES,
    ),
    max_size=3,
)
KEY_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "dataset": st.sampled_from([SCRATCH, SCRATCH, SCRATCH, "missing", "../x", "", 5]),
    "operation": st.sampled_from(["append", "overwrite", "create", "upsert"]),
    "fragments": st.lists(st.sampled_from(["qf1.x.y", "", "garbage", "qt1.a.b"]), max_size=2),
    "read_version": INTS,
    "version": st.one_of(INTS, st.sampled_from(["q3", "nope", "1"])),
    "tag": st.one_of(st.sampled_from(["q3", "", ".x", "a/b", "x.lock", "t" * 300]), st.text()),
    "as_of": st.sampled_from(["2020-01-01T00:00:00Z", "yesterday", "9999-12-31T00:00:00Z"]),
    "predicate": FILTERS,
    "columns": st.one_of(
        st.dictionaries(COLUMN_NAMES, st.one_of(FILTERS, JSON_SCALARS), max_size=2),
        st.lists(COLUMN_NAMES, max_size=3),
    ),
    "alterations": ALTERATIONS,
    "target_rows_per_fragment": INTS,
    "max_rows_per_group": INTS,
    "retain_versions": INTS,
    "older_than_seconds": st.one_of(
        st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0, 1e300, -1])
    ),
    "materialize_deletions_threshold": st.floats(allow_nan=False, allow_infinity=False),
    "job": st.one_of(st.sampled_from(["job-1", "", "../j", "j" * 200]), st.text(max_size=8)),
}


@st.composite
def action_bodies(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """Mostly well-typed bodies aimed at `scratch` (to get past the parser into the
    engine), the rest with any JSON, odd datasets and unknown keys."""
    action = draw(st.sampled_from(sorted(ACTION_KEYS)))
    allowed = ACTION_KEYS[action]
    keys = draw(st.lists(st.sampled_from(allowed or ["bogus"]), unique=True))
    if draw(st.integers(0, 9)) < 7:  # well-typed
        body = {k: draw(KEY_VALUES.get(k, JSON_VALUES)) for k in keys if k != "dataset"}
        if "dataset" in allowed:
            body["dataset"] = SCRATCH
        return action, body
    body = {k: draw(st.one_of(KEY_VALUES.get(k, JSON_VALUES), JSON_VALUES)) for k in keys}
    if draw(st.booleans()):
        body["bogus"] = draw(JSON_SCALARS)
    return action, body


@examples(300)
@given(request=action_bodies())
def test_actions_with_generated_bodies(sent: Campaign, request: tuple[str, dict]) -> None:
    c = sent
    action, body = request
    ensure_scratch(c)
    label = f"{action} {json.dumps(body, sort_keys=True)}"
    refused_leaves_no_trace(c, label, lambda: c.action(action, body), WRITE_ERRORS)
    c.alive()


@examples(25)
@given(
    action=st.sampled_from(sorted(ACTION_KEYS)),
    raw=st.one_of(
        st.binary(max_size=30),
        st.sampled_from(
            [b"[]", b'"x"', b"null", b'{"dataset": "scratch", "older_than_seconds": 1e999}']
        ),
    ),
)
def test_actions_with_raw_bodies(sent: Campaign, action: str, raw: bytes) -> None:
    c = sent
    ensure_scratch(c)
    label = f"{action} raw {raw!r}"
    refused_leaves_no_trace(c, label, lambda: c.action(action, raw), WRITE_ERRORS)


@examples(20)
@given(name=st.text(max_size=70).filter(no_leak_marker))
def test_unknown_action_names(sent: Campaign, name: str) -> None:
    c = sent
    if name in ACTION_KEYS:
        return
    label = f"DoAction type {name!r}"
    c.send(label, lambda: c.action(name, {"dataset": SCRATCH}), {"unimplemented"})


@examples(30)
@given(
    fragments=st.lists(st.sampled_from(["own", "other", "twice", "forged", "junk"]), max_size=3),
    operation=st.sampled_from(["append", "overwrite", "create"]),
    read_version=st.one_of(st.none(), st.integers(-1, 6), st.just(2**63)),
)
def test_commit_and_abort_with_hostile_fragments(
    sent: Campaign, fragments: list[str], operation: str, read_version: int | None
) -> None:
    """Staged tokens of this dataset, of another, listed twice, re-signed or junk."""
    c = sent
    c.put(cmd({"dataset": "stage", "mode": "overwrite"}), small_table())  # a known schema
    own = c.put(cmd({"dataset": "stage", "commit": False}), small_table(2))["fragments"][0]
    other = c.put(cmd({"dataset": "other", "commit": False}), small_table(2))["fragments"][0]
    kind, body, mac = own.split(".")
    tokens = {"own": [own], "other": [other], "twice": [own, own], "junk": ["qf1.."]}
    tokens["forged"] = [f"{kind}.{body[:-2]}AA.{mac}"]
    listed = [t for f in fragments for t in tokens[f]]
    doc: dict[str, Any] = {"dataset": "stage", "operation": operation, "fragments": listed}
    if read_version is not None:
        doc["read_version"] = read_version
    label = f"commit {fragments} {operation} {read_version}"
    c.send(label, lambda: c.action("commit", doc), WRITE_ERRORS, ok=True)
    abort = {"dataset": "stage", "fragments": listed}
    c.send(f"abort {fragments}", lambda: c.action("abort", abort), WRITE_ERRORS, ok=True)
    for name, token in (("stage", own), ("other", other)):  # leave nothing for the sweep
        c.action("abort", {"dataset": name, "fragments": [token]})


# -- the examples of issue 12 -------------------------------------------------------------
ISSUE = "issue12"  # a dataset of its own, created afresh by each test


def version_of(c: Campaign, name: str) -> int:
    return c.action("describe", {"dataset": name})["version"]


def test_issue_12_writes_that_must_be_refused(sent: Campaign, tmp_path: Any) -> None:
    """Each example of the issue: refused with invalid_argument as pylance refuses it,
    nothing written, the server alive."""
    c = sent
    c.put(cmd({"dataset": ISSUE, "mode": "overwrite"}), small_table())
    dup = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    empty_fsl = pa.table({"id": [1, 2], "v": pa.array([[], []], pa.list_(pa.int64(), 0))})
    reserved = {n: pa.table({"id": [1], n: [2]}) for n in ("_rowid", "_rowaddr", "_rowoffset")}
    for what, data in [("duplicate names", dup), ("fixed_size_list 0", empty_fsl)] + [
        (f"reserved {n}", t) for n, t in reserved.items()
    ]:
        with pytest.raises(OSError):  # the oracle refuses to create it too
            lance.write_dataset(data, str(tmp_path / f"{what}.lance"))
        for mode, name in (("create", f"new_{next(_fresh)}"), ("overwrite", ISSUE)):
            v = version_of(c, ISSUE)
            label = f"issue 12: DoPut {mode} with {what}"
            doc = {"dataset": name, "mode": mode}
            call = lambda d=doc, t=data: c.put(cmd(d), t)  # noqa: E731
            refused_leaves_no_trace(c, label, call, REFUSED, ok=False)
            assert version_of(c, ISSUE) == v
    # the overwrite refused, the old rows still read
    assert c.read(fl.FlightDescriptor.for_path(ISSUE)).num_rows == small_table().num_rows
    v = version_of(c, ISSUE)
    for label, action, body in [
        ("add _rowid", "add_columns", {"columns": {"_rowid": "id * 2"}}),
        ("add _rowaddr", "add_columns", {"columns": {"_rowaddr": "id"}}),
        ("rename to _rowid", "alter_columns", {"alterations": [{"path": "s", "name": "_rowid"}]}),
        (
            "alter one column twice",
            "alter_columns",
            {"alterations": [{"path": "s", "name": "s2"}, {"path": "s", "nullable": True}]},
        ),
        ("10 KB tag", "create_tag", {"tag": "t" * 10_000}),
        ("cleanup 1e300 s", "cleanup", {"older_than_seconds": 1e300}),
    ]:
        body = {"dataset": ISSUE, **body}
        call = lambda a=action, b=body: c.action(a, b)  # noqa: E731
        refused_leaves_no_trace(c, f"issue 12: {label}", call, REFUSED, ok=False)
    raw = b'{"dataset": "issue12", "older_than_seconds": Infinity}'
    call = lambda: c.action("cleanup", raw)  # noqa: E731
    refused_leaves_no_trace(c, "issue 12: cleanup Infinity", call, REFUSED, ok=False)
    staged = c.put(cmd({"dataset": ISSUE, "commit": False}), small_table(2))["fragments"]
    late = {"dataset": ISSUE, "operation": "append", "fragments": staged, "read_version": v + 5}
    with pytest.raises(fl.FlightError, match=f"read_version {v + 5} is not a version"):
        c.action("commit", late)
    assert version_of(c, ISSUE) == v
    assert c.action("abort", {"dataset": ISSUE, "fragments": staged})["removed_files"] == 1


def test_issue_12_messages_say_what_is_wrong(sent: Campaign) -> None:
    c = sent
    c.put(cmd({"dataset": ISSUE, "mode": "overwrite"}), small_table())
    cases = [
        ("create_tag", {"tag": "t" * 10_000}, "too long"),
        ("cleanup", {"older_than_seconds": 1e300}, "older_than_seconds"),
        ("add_columns", {"columns": {"_rowid": "id"}}, "reserved"),
        (
            "alter_columns",
            {"alterations": [{"path": "s", "nullable": True}, {"path": "s", "name": "t"}]},
            "twice",
        ),
    ]
    for action, body, words in cases:
        with pytest.raises(fl.FlightError, match=words) as e:
            c.action(action, {"dataset": ISSUE, **body})
        c.check_error(f"message {action}", e.value, {"invalid_argument"})
    with pytest.raises(fl.FlightError, match="at most 249"):
        c.client.get_flight_info(fl.FlightDescriptor.for_path("a" * 255))


# -- links out of the root ------------------------------------------------------------------
def tree(path: Path) -> dict[str, bytes]:
    """Every file below `path` with its bytes (links not followed)."""
    out = {}
    for dirpath, _, names in os.walk(path):
        for n in names:
            full = Path(dirpath, n)
            out[str(full.relative_to(path))] = full.read_bytes()
    return out


def test_links_leading_out_of_the_root(sent: Campaign, served: Served, tmp_path: Path) -> None:
    """A dataset directory that is a link out of the root, one under a linked directory,
    one with an entry linking out: refused by every RPC (permission_denied), nothing outside
    read, written or removed. A link that stays inside the root is served."""
    c = sent
    root, outside = served.root, tmp_path / "outside"
    write_dataset(small_table(), str(outside / "victim.lance"))
    (outside / "keep.txt").write_text("not the server's")
    write_dataset(small_table(), str(root / "team" / "inner.lance"))
    links = {
        root / "linked.lance": outside / "victim.lance",
        root / "dirlink": outside,
        root / "team" / "inner.lance" / "_indices": outside,
        root / "alias.lance": root / "base.lance",
    }
    for link, target in links.items():
        os.symlink(target, link)
    before = tree(outside)
    try:
        for name in ("linked", "dirlink/victim", "team/inner", "dirlink/new"):
            ticket = fl.Ticket(ReadTicket(name, 1).encode(Signer(served.key)))
            staged = {"dataset": name, "operation": "append", "fragments": ["qf1.a.b"]}
            calls = {
                "GetFlightInfo": lambda n=name: c.read(fl.FlightDescriptor.for_path(n)),
                "GetSchema": lambda n=name: c.client.get_schema(fl.FlightDescriptor.for_path(n)),
                "DoGet": lambda t=ticket: c.client.do_get(t).read_all(),
                "DoPut": lambda n=name: c.put(fl.FlightDescriptor.for_path(n), small_table(2)),
                "DoPut staged": lambda n=name: c.put(
                    cmd({"dataset": n, "commit": False}), small_table(2)
                ),
                "commit": lambda b=staged: c.action("commit", b),
            }
            for action, extra in [
                ("describe", {}),
                ("list_versions", {}),
                ("delete", {"predicate": "id > 0"}),
                ("create_tag", {"tag": "t"}),
                ("compact", {}),
                ("add_columns", {"columns": {"y": "id"}}),
                ("cleanup", {"older_than_seconds": 0, "delete_unverified": True}),
                ("abort", {"job": "j"}),
                ("drop_dataset", {}),
            ]:
                body = {"dataset": name, **extra}
                calls[action] = lambda a=action, b=body: c.action(a, b)
            for what, call in calls.items():
                c.send(f"{what} through link {name!r}", call, {"permission_denied"})
        assert tree(outside) == before
        names = {i.descriptor.path[0].decode() for i in c.client.list_flights()}
        assert not names & {"linked", "dirlink/victim", "team/inner"}
        got = c.read(fl.FlightDescriptor.for_path("alias"))  # a link inside the root: served
        assert got.sort_by("id").equals(c.base)
    finally:
        for link in links:
            link.unlink()
        shutil.rmtree(root / "team")


def test_cleanup_and_drop_never_remove_outside_the_dataset(
    sent: Campaign, served: Served, tmp_path: Path
) -> None:
    """Links deeper in a dataset (a file of data/ linking out, a directory of data/
    linking out): cleanup and drop_dataset remove the links, never what they point to."""
    c = sent
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "keep.lance").write_text("not the server's")
    (outside / "dir" / "old.lance").write_text("not the server's either")
    c.put(cmd({"dataset": "deep", "mode": "create"}), small_table())
    c.put(cmd({"dataset": "deep", "mode": "overwrite"}), small_table(3))
    data = served.root / "deep.lance" / "data"
    os.symlink(outside / "keep.lance", data / "unreferenced.lance")
    os.symlink(outside / "dir", data / "sub")
    before = tree(outside)
    body = {"dataset": "deep", "older_than_seconds": 0, "delete_unverified": True}
    stats = c.send("cleanup with links in data/", lambda: c.action("cleanup", body), set(), ok=True)
    assert stats["old_versions"] == 1 and tree(outside) == before
    assert c.read(fl.FlightDescriptor.for_path("deep")).equals(small_table(3))
    dropped = c.send(
        "drop_dataset with links in data/",
        lambda: c.action("drop_dataset", {"dataset": "deep"}),
        set(),
        ok=True,
    )
    assert dropped == {"dataset": "deep", "dropped": True}
    assert tree(outside) == before and not (served.root / "deep.lance").exists()
