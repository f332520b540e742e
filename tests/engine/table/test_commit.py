"""The commit protocol: rebased concurrent deletes, conflicts that name the winner,
idempotency keys, and commits interleaved with pylance's."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from quiver.format.dataset import dataset
from quiver.format.errors import CommitConflictError
from quiver.format.io import open_store
from quiver.format.proto import transaction_pb2
from quiver.format.table.commit import commit_transaction
from quiver.format.table.conflicts import Resolution, check
from quiver.format.table.transaction import IDEMPOTENCY_KEY, new_transaction


@pytest.fixture
def uri(tmp_path: Path) -> str:
    uri = str(tmp_path / "ds.lance")
    t = pa.table({"a": list(range(100)), "s": [f"r{i}" for i in range(100)]})
    lance.write_dataset(t, uri, data_storage_version="2.0", max_rows_per_file=40)
    return uri


def test_concurrent_deletes_on_one_fragment_are_merged(uri: str):
    first, second = dataset(uri), dataset(uri)
    first.delete("a < 5")
    second.delete("a >= 10 AND a < 15")  # same fragment, read before the first delete
    assert second.version == 3
    expected = lance.dataset(uri, version=1).to_table(filter="a >= 5 AND (a < 10 OR a >= 15)")
    assert lance.dataset(uri).to_table() == expected
    assert dataset(uri).to_table() == expected


def test_concurrent_deletes_emptying_a_fragment_drop_it(uri: str):
    first, second = dataset(uri), dataset(uri)
    first.delete("a < 20")
    second.delete("a >= 20 AND a < 40")
    assert [f.fragment_id for f in dataset(uri).get_fragments()] == [1, 2]
    assert lance.dataset(uri).to_table() == lance.dataset(uri, version=1).to_table(filter="a >= 40")


def test_delete_after_overwrite_is_incompatible(uri: str):
    stale = dataset(uri)
    lance.write_dataset(pa.table({"a": [1], "s": ["x"]}), uri, mode="overwrite")
    with pytest.raises(CommitConflictError) as err:
        stale.delete("a = 1")
    assert err.value.version == 2 and not err.value.retryable
    assert "version 2" in str(err.value)


def test_idempotency_key_commits_once(uri: str):
    store = open_store(uri)
    frag = dataset(uri).get_fragments()[0].metadata
    body = transaction_pb2.Transaction.Append(fragments=[frag])
    props = {IDEMPOTENCY_KEY: "job-42"}
    first = commit_transaction(store, new_transaction(1, "append", body, properties=props))
    again = commit_transaction(store, new_transaction(1, "append", body, properties=props))
    assert not first.duplicate and again.duplicate
    assert again.manifest.version == first.manifest.version == 2
    assert lance.dataset(uri).version == 2
    assert lance.dataset(uri).count_rows() == 140


def test_alternating_with_pylance(uri: str):
    ours = dataset(uri)
    ours.delete("a % 10 = 0")
    theirs = lance.dataset(uri)
    theirs.delete("a % 10 = 1")
    ours = dataset(uri)
    ours.delete("a % 10 = 2")
    ref = lance.dataset(uri)
    assert ref.version == 4
    assert ref.to_table() == ours.to_table()
    assert ref.to_table().column("a").to_pylist() == [
        i for i in range(100) if i % 10 not in (0, 1, 2)
    ]
    txns = ref.get_transactions()  # pylance parses the transactions we wrote
    assert len(txns) >= 3


def test_conflict_table_basics():
    def txn(op: str, **kw: object) -> transaction_pb2.Transaction:
        body = getattr(transaction_pb2.Transaction, op.title().replace("_", ""))(**kw)
        return new_transaction(1, op, body)

    assert check(txn("append"), txn("append")) is Resolution.OK
    assert check(txn("append"), txn("overwrite")) is Resolution.INCOMPATIBLE
    assert check(txn("append"), None) is Resolution.RETRY
    assert check(txn("overwrite"), txn("overwrite")) is Resolution.RETRY
    assert check(txn("delete", deleted_fragment_ids=[1]), txn("delete")) is Resolution.OK
    assert (
        check(txn("delete", deleted_fragment_ids=[1]), txn("delete", deleted_fragment_ids=[1]))
        is Resolution.REBASE
    )
    assert check(txn("restore", version=1), txn("append")) is Resolution.OK


def test_restore_keeps_history_readable(uri: str):
    dataset(uri).delete("a < 50")
    old = dataset(uri, version=1)
    old.restore()
    ref = lance.dataset(uri)
    assert ref.version == 3 and ref.count_rows() == 100
    assert ref.checkout_version(2).count_rows() == 50
