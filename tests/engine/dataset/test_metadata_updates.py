"""Config and metadata updates (`update_config`, `delete_config_keys`, `update_metadata`,
`update_schema_metadata`, `update_field_metadata`, the `replace_*` forms): the same steps
through both engines on twin datasets, compared after each (schemas with metadata,
config, table metadata, the transaction each wrote), and each engine reading the other's."""

from __future__ import annotations

import glob
import warnings
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from quiver.format.dataset import dataset
from quiver.format.errors import ColumnNotFoundError, InvalidInputError
from quiver.format.proto import transaction_pb2

STEPS = [
    ("update_config", ({"k1": "v1", "k2": "v2"},), {}),
    ("delete_config_keys", (["k2", "absent"],), {}),
    ("update_config", ({"k3": "v3", "k1": None},), {}),
    ("update_config", ({"k4": "v4"},), {"replace": True}),
    ("update_metadata", ({"owner": "me", "x": "1"},), {}),
    ("update_metadata", ({"x": None},), {}),
    ("update_schema_metadata", ({"sm": "1"},), {}),
    ("update_schema_metadata", ({"sm2": "2"},), {"replace": True}),
    ("replace_schema_metadata", ({"sm3": "3"},), {}),
    ("update_field_metadata", ({"a": {"fm": "1"}, "st.x": {"q": "2"}},), {}),
    ("update_field_metadata", ({"a": {"fm": None, "g": "h"}, "st": {"s": "t"}},), {}),
    ("replace_field_metadata", ("st.x", {"only": "this"}), {}),
]


def _twin(path: Path) -> str:
    uri = str(path)
    table = pa.table({"a": pa.array([1, 2], pa.int64()), "st": pa.array([{"x": 1}, {"x": 2}])})
    lance.write_dataset(table, uri, schema=table.schema.with_metadata({"orig": "m"}))
    return uri


def _state(ds: object) -> tuple:
    config = ds.config() if callable(ds.config) else ds.config
    return (ds.version, ds.schema, ds.schema.metadata, config, ds.metadata, ds.to_table())


def _body(uri: str, version: int) -> dict:
    """The UpdateConfig a version's transaction holds, its maps' entries by key (pylance
    writes them in hash order)."""
    (path,) = glob.glob(f"{uri}/_transactions/{version - 1}-*.txn")
    txn = transaction_pb2.Transaction()
    txn.ParseFromString(Path(path).read_bytes())
    body = txn.update_config

    def entries(update: transaction_pb2.Transaction.UpdateMap) -> tuple:
        found = {e.key: (e.value if e.HasField("value") else None) for e in update.update_entries}
        return update.replace, sorted(found.items(), key=lambda kv: kv[0])

    maps = ("config_updates", "table_metadata_updates", "schema_metadata_updates")
    out = {m: entries(getattr(body, m)) for m in maps if body.HasField(m)}
    out["fields"] = {k: entries(v) for k, v in body.field_metadata_updates.items()}
    return out


@pytest.mark.parametrize("writer", ["quiver", "pylance"])
def test_metadata_updates_as_pylance_s(tmp_path: Path, writer: str) -> None:
    """Each step by pylance on one twin and by `writer` on the other; both twins read by
    both engines after each step."""
    ref, mine = _twin(tmp_path / "ref"), _twin(tmp_path / "mine")
    for name, args, kwargs in STEPS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the replace_* forms
            expected = getattr(lance.dataset(ref), name)(*args, **kwargs)
            engine = dataset(mine) if writer == "quiver" else lance.dataset(mine)
            got = getattr(engine, name)(*args, **kwargs)
        assert got == expected, name
        for reader in (dataset, lance.dataset):
            assert _state(reader(mine)) == _state(lance.dataset(ref)), (name, reader)
            assert _state(reader(mine)) == _state(dataset(ref)), (name, reader)
        version = lance.dataset(ref).version
        assert _body(mine, version) == _body(ref, version), name


def test_bad_metadata_updates_commit_nothing(tmp_path: Path) -> None:
    uri = _twin(tmp_path / "t")
    ours = dataset(uri)
    with pytest.raises(ColumnNotFoundError, match="field 'nope' not found"):
        ours.update_field_metadata({"nope": {"a": "b"}})
    for bad in ({"a": 1}, {1: "a"}, ["a"]):
        with pytest.raises(InvalidInputError):
            ours.update_config(bad)
    with pytest.raises(InvalidInputError):
        ours.delete_config_keys("k")
    assert lance.dataset(uri).version == 1
