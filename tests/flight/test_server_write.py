"""Writes through a real Flight server: DoPut (commit or stage), commit, abort.

What the server writes is read back with `format.dataset` and pylance and compared whole.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import flight_helpers
import lance
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from flight_helpers import (
    Served,
    assert_clean_error,
    error_code,
    error_info,
    files_under,
    table,
)

from quiver.format.dataset import dataset, fragment_to_json, write_dataset, write_fragments

served = flight_helpers.served  # fixtures shared by the server test modules
name = flight_helpers.name


def both(uri: str, version: int | None = None) -> pa.Table:
    ours = dataset(uri, version=version).to_table()
    assert ours.equals(lance.dataset(uri, version=version).to_table())
    return ours


def data_files(served: Served, name: str) -> list[str]:
    return [f for f in files_under(served.path(name)) if f.startswith("data/")]


def test_put_create_append_overwrite(served: Served, name: str) -> None:
    uri = served.path(name)
    assert served.put(name, table(100), mode="create") == {"version": 1, "rows": 100}
    assert served.put(name, table(50, start=100)) == {"version": 2, "rows": 50}  # PATH
    assert served.put(name, table(5, start=150), mode="append") == {"version": 3, "rows": 5}
    assert both(uri).equals(table(155))
    assert served.read(name).equals(table(155))
    assert served.put(name, table(7), mode="overwrite") == {"version": 4, "rows": 7}
    assert both(uri).equals(table(7))
    assert both(uri, version=3).equals(table(155))
    # appending nothing commits nothing
    assert served.put(name, table(0)) == {"version": 4, "rows": 0}


def test_put_creates_nested_dataset_and_overwrite_may_change_schema(
    served: Served, name: str
) -> None:
    target = f"team/{name}"
    assert served.put(target, table(10)) == {"version": 1, "rows": 10}  # append creates
    other = pa.table({"k": pa.array(["a", "b"]), "v": pa.array([1.5, None])})
    assert served.put(target, other, mode="overwrite")["version"] == 2
    assert both(served.path(target)).equals(other)


def test_put_create_refuses_existing(served: Served, name: str) -> None:
    served.put(name, table(3), mode="create")
    with pytest.raises(fl.FlightError) as e:
        served.put(name, table(3), mode="create")
    assert_clean_error(e.value, "already_exists", served.root)


def test_put_with_mismatched_schema_writes_nothing(served: Served, name: str) -> None:
    served.put(name, table(20), mode="create")
    before = data_files(served, name)
    bad = table(5).drop_columns(["x"]).append_column("z", pa.array([1] * 5))
    for data in (bad, table(5).cast(table(5).schema.set(0, pa.field("id", pa.string())))):
        with pytest.raises(fl.FlightError) as e:
            served.put(name, data)
        message = assert_clean_error(e.value, "invalid_argument", served.root)
        assert "column" in message
    assert data_files(served, name) == before
    assert dataset(served.path(name)).version == 1


def test_put_null_into_non_nullable_column_removes_written_files(served: Served, name: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    served.put(
        name, pa.table({"id": pa.array(range(10), pa.int64())}, schema=schema), mode="create"
    )
    before = data_files(served, name)
    bad = pa.table({"id": pa.array([*range(5000), None], pa.int64())})
    with pytest.raises(fl.FlightError) as e:
        served.put(name, bad.cast(pa.schema([pa.field("id", pa.int64())])))
    assert_clean_error(e.value, "invalid_argument", served.root)
    assert data_files(served, name) == before
    assert not [f for f in files_under(served.path(name)) if ".tmp" in f]


CUT_CLIENT = textwrap.dedent(
    """
    import json, os, sys
    import pyarrow as pa, pyarrow.flight as fl
    uri, cmd, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = fl.connect(uri)
    batch = pa.record_batch({"id": pa.array(range(rows), pa.int64())})
    writer, _ = client.do_put(fl.FlightDescriptor.for_command(cmd), batch.schema)
    for _ in range(3):
        writer.write_batch(batch)
    print("sent", flush=True)
    sys.stdin.readline()
    os._exit(1)  # the connection drops without the end of the stream
    """
)


def _cut_upload(served: Served, cmd: dict, rows: int) -> None:
    n = len(served.log.find("DoPut", cmd["dataset"]))
    proc = subprocess.Popen(
        [sys.executable, "-c", CUT_CLIENT, served.uri, json.dumps(cmd), str(rows)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout.readline().strip() == b"sent"
    time.sleep(0.3)  # let the server write files
    proc.stdin.close()
    proc.wait(10)
    deadline = time.time() + 15
    while len(served.log.find("DoPut", cmd["dataset"])) == n:
        assert time.time() < deadline, "the server never finished the cut DoPut"
        time.sleep(0.02)
    assert served.log.find("DoPut", cmd["dataset"])[-1]["status"] == "cancelled"


def test_put_cut_off_midway_leaves_nothing(served: Served, name: str) -> None:
    # an existing dataset: the version and the files stay as they were
    served.put(name, pa.table({"id": pa.array([1, 2], pa.int64())}), mode="create")
    before = files_under(served.path(name))
    _cut_upload(served, {"dataset": name, "mode": "append"}, 600_000)  # > 1 data file
    assert files_under(served.path(name)) == before
    assert dataset(served.path(name)).version == 1
    # a new dataset, staging: nothing at all remains
    fresh = f"{name}_new"
    _cut_upload(served, {"dataset": fresh, "mode": "create", "commit": False}, 600_000)
    assert files_under(served.path(fresh)) == []
    with pytest.raises(fl.FlightError) as e:
        served.info(fresh)
    assert_clean_error(e.value, "not_found", served.root)


def test_stage_then_commit_append_and_overwrite(served: Served, name: str) -> None:
    uri = served.path(name)
    served.put(name, table(10), mode="create")
    a = served.put(name, table(30, start=10), commit=False)
    b = served.put(name, table(20, start=40), commit=False)
    assert a["rows"] == 30 and len(a["fragments"]) == 1
    assert dataset(uri).version == 1  # nothing visible yet
    assert served.read(name).equals(table(10))
    result = served.action(
        "commit",
        {
            "dataset": name,
            "operation": "append",
            "fragments": a["fragments"] + b["fragments"],
            "read_version": 1,
        },
    )
    assert result == {"version": 2, "rows": 50}
    assert both(uri).equals(table(60))
    # committing the same fragments again is refused
    with pytest.raises(fl.FlightError) as e:
        served.action(
            "commit", {"dataset": name, "operation": "append", "fragments": a["fragments"]}
        )
    assert_clean_error(e.value, "already_exists", served.root)
    # overwrite with staged fragments of another schema
    other = pa.table({"z": pa.array([1, 2, 3], pa.int32())})
    c = served.put(name, other, mode="overwrite", commit=False)
    assert served.action(
        "commit", {"dataset": name, "operation": "overwrite", "fragments": c["fragments"]}
    ) == {"version": 3, "rows": 3}
    assert both(uri).equals(other)
    # an overwrite with no fragments truncates
    assert (
        served.action("commit", {"dataset": name, "operation": "overwrite", "fragments": []})[
            "version"
        ]
        == 4
    )
    assert both(uri).num_rows == 0


def test_stage_and_commit_create(served: Served, name: str) -> None:
    uri = served.path(name)
    parts = [
        served.put(name, table(10, start=i * 10), mode="create", commit=False) for i in range(3)
    ]
    frags = [f for p in parts for f in p["fragments"]]
    assert served.action(
        "commit", {"dataset": name, "operation": "create", "fragments": frags}
    ) == {
        "version": 1,
        "rows": 30,
    }
    assert both(uri).sort_by("id").equals(table(30))
    with pytest.raises(fl.FlightError) as e:
        served.action("commit", {"dataset": name, "operation": "create", "fragments": frags})
    assert_clean_error(e.value, "already_exists", served.root)


def test_commit_idempotency_key(served: Served, name: str) -> None:
    served.put(name, table(5), mode="create")
    staged = served.put(name, table(5, start=5), commit=False)["fragments"]
    body = {"dataset": name, "operation": "append", "fragments": staged, "idempotency_key": "job-1"}
    first = served.action("commit", body)
    assert first["version"] == 2
    served.put(name, table(1, start=99))  # someone else commits meanwhile
    again = served.action("commit", body)
    assert again["version"] == 2 and again.get("duplicate") is True
    assert served.action("commit", {**body, "read_version": 1})["version"] == 2
    assert both(served.path(name)).num_rows == 11


def test_commit_conflict_reports_retryable_and_version(served: Served, name: str) -> None:
    served.put(name, table(5), mode="create")
    staged = served.put(name, table(5, start=5), commit=False)["fragments"]
    served.put(name, table(3), mode="overwrite")  # version 2 replaces everything
    with pytest.raises(fl.FlightError) as e:
        served.action(
            "commit",
            {"dataset": name, "operation": "append", "fragments": staged, "read_version": 1},
        )
    assert_clean_error(e.value, "commit_conflict", served.root)
    info = error_info(e.value)
    assert info["retryable"] is False and info["version"] == 2
    # the staged files are kept for the client to retry or abort
    assert served.action("abort", {"dataset": name, "fragments": staged}) == {
        "removed_files": 1,
        "kept_files": 0,
    }


def test_abort_removes_staged_files_only(served: Served, name: str) -> None:
    served.put(name, table(5), mode="create")
    before = data_files(served, name)
    staged = served.put(name, table(5, start=5), commit=False)["fragments"]
    committed = served.put(name, table(5, start=10), commit=False)["fragments"]
    served.action("commit", {"dataset": name, "operation": "append", "fragments": committed})
    assert len(data_files(served, name)) == len(before) + 2
    result = served.action("abort", {"dataset": name, "fragments": staged + committed})
    assert result == {"removed_files": 1, "kept_files": 1}
    assert both(served.path(name)).num_rows == 10
    # aborting twice is harmless; committing aborted fragments is refused
    served.action("abort", {"dataset": name, "fragments": staged})
    with pytest.raises(fl.FlightError) as e:
        served.action("commit", {"dataset": name, "operation": "append", "fragments": staged})
    assert_clean_error(e.value, "invalid_argument", served.root)
    # a staged new dataset that is aborted leaves no directory behind
    fresh = f"{name}_fresh"
    frags = served.put(fresh, table(4), mode="create", commit=False)["fragments"]
    served.action("abort", {"dataset": fresh, "fragments": frags})
    assert files_under(served.path(fresh)) == []


def test_commit_refuses_fragments_never_staged_or_from_elsewhere(served: Served, name: str) -> None:
    served.put(name, table(5), mode="create")
    other = f"{name}_other"
    served.put(other, table(5), mode="create")
    theirs = served.put(other, table(5), commit=False)["fragments"]
    real = served.put(name, table(5), commit=False)["fragments"][0]
    kind, body, mac = real.split(".")
    engine_frag = fragment_to_json(write_fragments(table(5), served.path(name))[0])
    forged = [
        ["not a fragment"],
        [engine_frag],  # an engine fragment the server never signed
        [f"{kind}.{body}.{mac[:-2]}AA"],  # altered signature
        [f"{kind}.{body[:-4]}.{mac}"],  # truncated payload
        [real[: len(real) // 2]],
        [f"qt1.{body}.{mac}"],  # signed as another kind
        [17],
        theirs,  # staged for another dataset
        [real, real],  # twice
    ]
    for frags in forged:
        with pytest.raises(fl.FlightError) as e:
            served.action("commit", {"dataset": name, "operation": "append", "fragments": frags})
        assert_clean_error(e.value, "invalid_argument", served.root)
        with pytest.raises(fl.FlightError) as e:
            served.action("abort", {"dataset": name, "fragments": frags})
        assert_clean_error(e.value, "invalid_argument", served.root)
    assert dataset(served.path(name)).version == 1
    # and fragments staged for append cannot create a dataset
    with pytest.raises(fl.FlightError) as e:
        served.action(
            "commit",
            {"dataset": name, "operation": "overwrite", "fragments": [real]},
        )
    assert_clean_error(e.value, "invalid_argument", served.root)


def test_written_dataset_is_appendable_by_pylance_and_back(served: Served, name: str) -> None:
    uri = served.path(name)
    served.put(name, table(100), mode="create")
    lance.write_dataset(table(10, start=100), uri, mode="append")
    served.put(name, table(10, start=110))
    assert both(uri).equals(table(120))
    assert served.read(name).equals(table(120))


def test_put_keeps_legacy_storage_version(served: Served, name: str) -> None:
    uri = served.path(name)
    write_dataset(table(10), uri, data_storage_version="legacy")
    served.put(name, table(10, start=10))
    staged = served.put(name, table(10, start=20), commit=False)["fragments"]
    served.action("commit", {"dataset": name, "operation": "append", "fragments": staged})
    assert dataset(uri).data_storage_version == "0.1"
    assert both(uri).equals(table(30))
    # an overwrite keeps the storage version too, as pylance's does
    served.put(name, table(4, start=100), mode="overwrite")
    staged = served.put(name, table(3), mode="overwrite", commit=False)["fragments"]
    served.action("commit", {"dataset": name, "operation": "overwrite", "fragments": staged})
    ds = dataset(uri)
    assert ds.data_storage_version == "0.1" == lance.dataset(uri).data_storage_version
    files = [f for fr in ds.manifest.pb.fragments for f in fr.files]
    assert {(f.file_major_version, f.file_minor_version) for f in files} == {(0, 2)}
    assert both(uri).equals(table(3))
    # fragments staged (at 2.0) before a legacy dataset appeared cannot overwrite it
    later = f"{name}_later"
    early = served.put(later, table(3), mode="overwrite", commit=False)["fragments"]
    write_dataset(table(2), served.path(later), data_storage_version="legacy")
    with pytest.raises(fl.FlightError) as e:
        served.action("commit", {"dataset": later, "operation": "overwrite", "fragments": early})
    assert "storage version" in assert_clean_error(e.value, "invalid_argument", served.root)
    dict_data = pa.table({"d": pa.array(["a", "b"]).dictionary_encode()})
    with pytest.raises(fl.FlightError) as e:
        served.put(name, dict_data, mode="overwrite")
    assert_clean_error(e.value, "unimplemented", served.root)


def test_put_of_types_lance_cannot_store_leaves_nothing(served: Served, name: str) -> None:
    # maps need storage version 2.2 (the default for new datasets); 2.0 cannot hold them
    maps = pa.table({"m": pa.array([[("a", 1)], None, []], pa.map_(pa.string(), pa.int64()))})
    served.put(f"{name}_map", maps, mode="create")
    assert served.read(f"{name}_map").equals(maps)
    assert lance.dataset(served.path(f"{name}_map")).to_table().equals(maps)
    cases = [
        pa.table(
            {
                "u": pa.UnionArray.from_sparse(
                    pa.array([0, 1], pa.int8()), [pa.array([1, 2]), pa.array(["a", "b"])]
                )
            }
        ),
    ]
    for i, data in enumerate(cases):
        target = f"{name}_{i}"
        with pytest.raises(fl.FlightError) as e:
            served.put(target, data, mode="create")
        code = error_code(e.value)
        assert code in ("unimplemented", "invalid_argument")
        assert_clean_error(e.value, code, served.root)
        assert not (served.root / f"{target}.lance").exists()
