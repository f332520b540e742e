"""The REST namespace answers as pylance's own reference adapter does: the same calls sent
to `quiver serve --namespace-port` and to `lance.namespace.RestAdapter("dir")`, statuses,
error codes and answers compared (locations, sizes and times aside, which differ by
layout)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from namespace_helpers import ARROW, Answer, call, ipc_stream, namespace_server, reference_adapter

T = pa.table(
    {
        "id": pa.array([1, 2, 3], pa.int64()),
        "name": ["a", "b", "c"],
        "vec": pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.float32(), 2)),
    }
)
TYPES = pa.table(
    {
        "b": pa.array([True, None]),
        "i8": pa.array([1, None], pa.int8()),
        "u64": pa.array([1, None], pa.uint64()),
        "f16": pa.array([1.5, None], pa.float16()),
        "ls": pa.array(["x", None], pa.large_string()),
        "bin": pa.array([b"x", None], pa.binary()),
        "fsb": pa.array([b"abcd", None], pa.binary(4)),
        "d32": pa.array([1, None], pa.date32()),
        "ts": pa.array([1, None], pa.timestamp("us", "UTC")),
        "t64": pa.array([1, None], pa.time64("us")),
        "dec": pa.array([None, None], pa.decimal128(10, 2)),
        "lst": pa.array([[1], None], pa.list_(pa.int32())),
        "llst": pa.array([["a"], None], pa.large_list(pa.string())),
        "st": pa.array(
            [{"a": 1, "b": "x"}, None], pa.struct([("a", pa.int32()), ("b", pa.string())])
        ),
        "m": pa.array([[("k", 1)], None], pa.map_(pa.string(), pa.int64())),
    }
).replace_schema_metadata({"owner": "team"})

# (method, path, body, content type, how to compare the answers)
STEPS: list[tuple[str, str, Any, str | None, str]] = [
    ("POST", "/v1/namespace/ns1/create", {}, "json", "same"),
    ("POST", "/v1/namespace/ns1/create", {}, "json", "code"),
    ("POST", "/v1/namespace/ns2/create", {"properties": {"k": "v"}}, "json", "status"),
    ("POST", "/v1/namespace/ns2/describe", {}, "json", "same"),
    ("POST", "/v1/namespace/ns1/exists", {}, "json", "same"),
    ("POST", "/v1/namespace/nope/exists", {}, "json", "code"),
    ("GET", "/v1/namespace/%24/list", None, None, "same"),
    ("GET", "/v1/namespace/%24/list?limit=1", None, None, "same"),
    ("GET", "/v1/namespace/ns1/list", None, None, "same"),
    ("POST", "/v1/table/ns1%24t1/create", T, "arrow", "keys:version"),
    ("POST", "/v1/table/types/create", TYPES, "arrow", "keys:version"),
    ("POST", "/v1/table/types/describe", {"load_detailed_metadata": True}, "json",
     "keys:schema,version"),
    ("POST", "/v1/table/ns1%24t1/describe", {}, "json", "keys:table,namespace"),
    ("POST", "/v1/table/ns1%24t1/describe?load_detailed_metadata=true", {}, "json", "detailed"),
    ("POST", "/v1/table/ns1%24t1/exists", {}, "json", "same"),
    ("POST", "/v1/table/ns1%24t2/exists", {}, "json", "code"),
    ("POST", "/v1/table/ns1%24t2/declare", {}, "json", "keys:"),
    ("POST", "/v1/table/ns1%24t2/declare", {}, "json", "code"),
    ("GET", "/v1/namespace/ns1/table/list", None, None, "same"),
    ("POST", "/v1/table/ns1%24t1/count_rows", {}, "json", "same"),
    ("POST", "/v1/table/ns1%24t1/count_rows", {"predicate": "id > 1"}, "json", "same"),
    ("POST", "/v1/table/ns1%24t1/query", {"k": 10, "vector": {}, "filter": "id > 1",
     "columns": {"column_names": ["id", "name"]}}, "json", "table"),
    ("POST", "/v1/table/ns1%24t1/query", {"k": 2, "vector": {"single_vector": [1, 2]},
     "vector_column": "vec"}, "json", "table"),
    ("POST", "/v1/table/ns1%24t1/query", {"k": 2, "vector": {"single_vector": [1, 2]}}, "json",
     "code"),
    ("POST", "/v1/table/ns1%24t1/insert", T, "arrow", "same"),
    ("POST", "/v1/table/ns1%24t1/insert?mode=overwrite", T, "arrow", "same"),
    ("POST", "/v1/table/ns1%24t1/merge_insert?on=id&when_matched_update_all=true"
     "&when_not_matched_insert_all=true", T.slice(1), "arrow", "same"),
    ("POST", "/v1/table/ns1%24t1/update", {"predicate": "id = 1", "updates": [["name", "'z'"]]},
     "json", "same"),
    ("POST", "/v1/table/ns1%24t1/delete", {"predicate": "id = 2"}, "json", "same"),
    ("POST", "/v1/table/ns1%24t1/count_rows", {}, "json", "same"),
    ("POST", "/v1/table/ns1%24t1/version/list", {}, "json", "versions"),
    ("POST", "/v1/table/ns1%24t1/version/describe", {"version": 2}, "json", "version"),
    ("POST", "/v1/table/ns1%24t1/tags/create", {"tag": "v1", "version": 1}, "json", "same"),
    ("POST", "/v1/table/ns1%24t1/tags/create", {"tag": "v1", "version": 1}, "json", "code"),
    ("POST", "/v1/table/ns1%24t1/tags/list", {}, "json", "tags"),
    ("POST", "/v1/table/ns1%24t1/tags/version", {"tag": "v1"}, "json", "same"),
    ("POST", "/v1/table/ns1%24t1/tags/version", {"tag": "nope"}, "json", "code"),
    ("POST", "/v1/table/ns1%24t1/create_index", {"column": "id", "index_type": "BTREE"}, "json",
     "status"),
    ("POST", "/v1/table/ns1%24t1/index/list", {}, "json", "indexes"),
    ("POST", "/v1/table/ns1%24t1/index/id_idx/stats", {}, "json", "same"),
    ("POST", "/v1/table/ns1%24t1/stats", {}, "json", "stats"),
    ("POST", "/v1/namespace/ns1/drop", {}, "json", "code"),
    ("POST", "/v1/table/ns1%24t2/drop", {}, "json", "keys:id"),
    ("POST", "/v1/table/ns1%24t2/describe", {}, "json", "code"),
    ("POST", "/v1/namespace/ns1/describe", {"id": ["zz"]}, "json", "code"),
    ("POST", "/v1/namespace/ns1/describe", b"{bad", "json", "code"),
    ("POST", "/v1/namespace/ns1/describe", {}, None, "code"),
    ("GET", "/v1/namespace/ns1/describe", None, None, "status"),
    ("POST", "/v1/nothing", {}, "json", "status"),
    ("POST", "/v1/table/a%24b%24c/describe", {}, "json", "code"),
    ("POST", "/v1/namespace/ns1%24sub/create", {}, "json", "same"),
    ("POST", "/v1/namespace/zz%24sub/create", {}, "json", "code"),
    ("GET", "/v1/namespace/ns1/list", None, None, "same"),
]  # fmt: skip


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    base = tmp_path_factory.mktemp("contract")
    with namespace_server(base / "quiver") as quiver, reference_adapter(base / "ref") as ref:
        yield quiver.url, ref


def _send(url: str, method: str, path: str, body: Any, kind: str | None) -> Answer:
    if isinstance(body, pa.Table):
        return call(url, method, path, ipc_stream(body), content_type=ARROW)
    return call(url, method, path, body, content_type="application/json" if kind else None)


def _subset(doc: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    return {k: doc.get(k) for k in keys}


def _compare(how: str, ours: Answer, theirs: Answer, step: str) -> None:
    assert ours.status == theirs.status, (step, ours.data[:300], theirs.data[:300])
    if how == "status":
        return
    if how == "code":
        assert ours.code == theirs.code, (step, ours.data, theirs.data)
        return
    if how == "same":
        assert ours.json == theirs.json, step
    elif how.startswith("keys:"):
        keys = [k for k in how[5:].split(",") if k]
        assert _subset(ours.json, keys) == _subset(theirs.json, keys), step
        assert "location" in ours.json, step
    elif how == "detailed":
        mine, ref = ours.json, theirs.json
        assert _subset(mine, ["table", "namespace", "version", "schema"]) == _subset(
            ref, ["table", "namespace", "version", "schema"]
        )
        counts = ["total_rows", "total_fragments", "total_data_files", "total_deletion_files"]
        assert mine["metadata"]["total_rows"] == str(T.num_rows)
        if "metadata" in ref:  # the reference sends it for the body's flag, not the query's
            assert _subset(mine["metadata"], counts) == _subset(ref["metadata"], counts)
    elif how == "table":
        assert ours.table() == theirs.table(), step
    elif how == "versions":
        assert [v["version"] for v in ours.json["versions"]] == [
            v["version"] for v in theirs.json["versions"]
        ]
        assert all(v["manifest_path"].endswith(".manifest") for v in ours.json["versions"])
    elif how == "version":
        assert ours.json["version"]["version"] == theirs.json["version"]["version"]
    elif how == "tags":
        assert {t: v["version"] for t, v in ours.json["tags"].items()} == {
            t: v["version"] for t, v in theirs.json["tags"].items()
        }
    elif how == "indexes":
        keys = ["index_name", "columns", "status", "index_type", "type_url", "num_indexed_rows",
                "num_unindexed_rows", "num_segments"]  # fmt: skip
        assert [_subset(i, keys) for i in ours.json["indexes"]] == [
            _subset(i, keys) for i in theirs.json["indexes"]
        ]
    elif how == "stats":
        mine, ref = ours.json, theirs.json
        assert _subset(mine, ["num_rows", "num_indices"]) == _subset(
            ref, ["num_rows", "num_indices"]
        )
        keys = ["num_fragments", "num_small_fragments"]
        assert _subset(mine["fragment_stats"], keys) == _subset(ref["fragment_stats"], keys)
    else:
        raise AssertionError(how)


def test_every_step_answers_as_the_reference_adapter(servers: tuple[str, str]) -> None:
    ours, theirs = servers
    for method, path, body, kind, how in STEPS:
        step = f"{method} {path}"
        a = _send(ours, method, path, body, kind)
        b = _send(theirs, method, path, body, kind)
        _compare(how, a, b, step)
        if a.status >= 400:
            assert a.headers["content-type"].startswith("application/json"), step
            assert isinstance(a.json["error"], str) and "/tmp" not in a.json["error"], step


def test_error_bodies_always_carry_a_code(tmp_path: Path) -> None:
    with namespace_server(tmp_path / "q") as s:
        for method, path in [("POST", "/v1/nothing"), ("GET", "/v1/table/x/describe"),
                             ("DELETE", "/v1/namespace/a/create")]:  # fmt: skip
            a = call(s.url, method, path, {})
            assert a.status in (404, 405) and a.json["code"] == 0, (method, path, a.data)


def test_full_text_query_answers_as_the_reference(tmp_path: Path) -> None:
    """QueryTable's full_text_query over an INVERTED index pylance built at the table's
    location, on both servers."""
    import lance
    from fulltext_corpus import assert_same_answers, text_table

    rows = text_table(300, 21)
    with (
        namespace_server(tmp_path / "quiver") as quiver,
        reference_adapter(tmp_path / "ref") as ref,
    ):
        answers = []
        for url in (quiver.url, ref):
            made = call(url, "POST", "/v1/table/docs/create", ipc_stream(rows), content_type=ARROW)
            assert made.status == 200, made.data
            location = call(url, "POST", "/v1/table/docs/describe", {}).json["location"]
            lance.dataset(location).create_scalar_index("text", "INVERTED")
            match = {"match": {"terms": "apple", "column": "text"}}
            fox = {"match": {"terms": "fox", "column": "text", "boost": 2.0}}
            for fts in (
                {"string_query": {"query": "apple fox", "columns": ["text"]}},
                {
                    "structured_query": {
                        "query": {"boolean": {"must": [match], "should": [fox], "must_not": []}}
                    }
                },
            ):
                body = {
                    "k": 10,
                    "vector": {},
                    "full_text_query": fts,
                    "columns": {"column_names": ["id"]},
                    "with_row_id": True,
                }
                answer = call(url, "POST", "/v1/table/docs/query", body)
                assert answer.status == 200, answer.data
                answers.append(answer.table())
        for ours, theirs in zip(answers[:2], answers[2:], strict=True):
            assert_same_answers(theirs.select(["id", "_score", "_rowid"]), ours, "QueryTable fts")
