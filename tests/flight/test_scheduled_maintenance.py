"""Scheduled maintenance (`--maintenance-interval`): compaction of datasets that gathered
small fragments and index updates, beside writers, read back by pylance."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from quiver.clients import Client
from quiver.flight_server.config import ConfigError, ServerConfig
from quiver.flight_server.maintenance import Maintenance
from quiver.flight_server.server import build_server
from quiver.format.dataset import dataset, write_dataset

KEY = b"maintenance-tests-ticket-key-012345"


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _ids(path: Path) -> list[int]:
    return sorted(lance.dataset(str(path)).to_table(columns=["id"]).column("id").to_pylist())


def test_a_round_compacts_small_fragments_and_updates_indices(tmp_path: Path) -> None:
    """Twenty small appends after a BTREE index: a round compacts the nineteen it does not
    cover into one (as pylance, compaction does not merge indexed with unindexed fragments)
    and the index covers every fragment again; a dataset under the threshold is left
    alone; pylance reads both with the same rows."""
    busy, quiet = tmp_path / "busy.lance", tmp_path / "quiet.lance"
    write_dataset(_rows(0, 10), str(busy))
    dataset(str(busy)).create_scalar_index("id", "BTREE")
    for i in range(1, 20):
        write_dataset(_rows(10 * i, 10), str(busy), mode="append")
    write_dataset(_rows(0, 5), str(quiet))
    write_dataset(_rows(5, 5), str(quiet), mode="append")
    server = build_server(ServerConfig(root=str(tmp_path), port=0, ticket_key=KEY))
    try:
        stats = Maintenance(server.service.handles, min_fragments=16).run()
    finally:
        server.shutdown()
    assert (stats.datasets, stats.compacted, stats.failed) == (2, 1, 0)
    assert stats.fragments_removed == 19 and stats.indices_updated == 1
    after = lance.dataset(str(busy))
    assert len(after.get_fragments()) == 2
    [index] = after.list_indices()
    assert set(index["fragment_ids"]) == {f.fragment_id for f in after.get_fragments()}
    assert _ids(busy) == list(range(200))
    assert len(lance.dataset(str(quiet)).get_fragments()) == 2
    assert _ids(quiet) == list(range(10))


def test_scheduled_rounds_run_beside_writers(tmp_path: Path) -> None:
    """A server with --maintenance-interval 1 under two appending clients: the dataset's
    fragments are compacted while they write, and no row is lost or doubled."""
    server = build_server(
        ServerConfig(
            root=str(tmp_path),
            port=0,
            ticket_key=KEY,
            maintenance_interval=1,
            maintenance_fragments=4,
        )
    )
    try:
        Client(server.locations[0]).write("t", _rows(0, 1), mode="create")
        errors: list[BaseException] = []

        def writer(w: int) -> None:
            try:
                client = Client(server.locations[0])
                for i in range(40):
                    client.write("t", _rows(1000 * (w + 1) + i, 1))
                    time.sleep(0.02)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        deadline = time.monotonic() + 20
        path = tmp_path / "t.lance"
        while len(lance.dataset(str(path)).get_fragments()) >= 4 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        server.shutdown()
    assert not errors, errors
    ds = lance.dataset(str(path))
    assert len(ds.get_fragments()) < 4  # 81 one-row appends, compacted as they came
    assert _ids(path) == sorted([0] + [1000 * (w + 1) + i for w in range(2) for i in range(40)])


def test_maintenance_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="--maintenance-interval"):
        ServerConfig(root="/tmp", maintenance_interval=-1).validate()
    with pytest.raises(ConfigError, match="--maintenance-fragments"):
        ServerConfig(root="/tmp", maintenance_fragments=1).validate()
