"""Load: 16 readers pull every endpoint while 4 writers append and commit, on a real server.

Every reader must see one consistent snapshot (exactly the version its FlightInfo names);
every commit lands exactly once.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as fl
import pytest
from server_process import quiver_serve

from quiver.format.dataset import dataset, write_dataset

pytestmark = pytest.mark.slow
READERS, WRITERS, APPENDS = 16, 4, 10


SCHEMA = pa.schema([("writer", pa.int64()), ("seq", pa.int64()), ("payload", pa.string())])


def _rows(writer: int, seq: int, n: int) -> pa.Table:
    payload = [f"w{writer}-s{seq}-{i}" for i in range(n)]
    return pa.table([[writer] * n, [seq] * n, payload], schema=SCHEMA)


def test_readers_see_snapshots_while_writers_commit(tmp_path: Path):
    write_dataset(_rows(-1, 0, 20000), str(tmp_path / "load.lance"), max_rows_per_file=2500)
    seen: list[tuple[int, pa.Table]] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    lock = threading.Lock()
    with quiver_serve(tmp_path) as (uri, _pid):

        def writer(w: int) -> None:
            try:
                client = fl.connect(uri)
                for seq in range(APPENDS):
                    desc = fl.FlightDescriptor.for_path("load")
                    put, meta = client.do_put(desc, SCHEMA)
                    put.write_table(_rows(w, seq, 100))
                    put.done_writing()
                    answer = json.loads(meta.read().to_pybytes())
                    put.close()
                    assert answer["rows"] == 100
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        def reader() -> None:
            try:
                client = fl.connect(uri)
                while not stop.is_set():
                    info = client.get_flight_info(fl.FlightDescriptor.for_path("load"))
                    version = json.loads(info.app_metadata)["version"]
                    parts = [client.do_get(e.ticket).read_all() for e in info.endpoints]
                    with lock:
                        seen.append((version, pa.concat_tables(parts)))
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
        readers = [threading.Thread(target=reader) for _ in range(READERS)]
        started = time.time()
        for t in threads + readers:
            t.start()
        for t in threads:
            t.join(timeout=180)
        stop.set()
        for t in readers:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads + readers), "load test did not finish"
        assert time.time() - started < 180
    assert not errors, errors[:3]
    ds = dataset(str(tmp_path / "load.lance"))
    assert ds.version == 1 + WRITERS * APPENDS  # every commit landed exactly once
    final = ds.to_table().filter(pa.compute.field("writer") >= 0)
    pairs = sorted(set(zip(final["writer"].to_pylist(), final["seq"].to_pylist(), strict=True)))
    assert pairs == [(w, s) for w in range(WRITERS) for s in range(APPENDS)]
    assert final.num_rows == WRITERS * APPENDS * 100
    assert len(seen) >= READERS
    snapshots = {}
    for version, table in seen:
        if version not in snapshots:
            snapshots[version] = dataset(str(tmp_path / "load.lance"), version=version).to_table()
        assert table.equals(snapshots[version]), f"a reader saw an inconsistent version {version}"
