"""Quickstart: the Python client against `make serve`'s demo server.

    make serve                                  # in one terminal
    .venv/bin/python clients/examples/quickstart.py [grpc://127.0.0.1:8815]

It lists the datasets, reads the demo dataset, then writes a scratch dataset
`quickstart` (one-shot writes, staged writes committed atomically, time travel, tags,
deletes) and drops it again.
"""

from __future__ import annotations

import sys

import pyarrow as pa

from quiver.clients import Client, CommitConflict, NotFound


def main(uri: str = "grpc://127.0.0.1:8815") -> None:
    with Client(uri, timeout=30) as qc:
        print("health:", qc.healthcheck())
        names = qc.datasets()
        print("datasets:", names)
        if names:
            demo = names[0]
            print(f"{demo}: {qc.describe(demo)['rows']} rows;", qc.schema(demo).names)
            # one FlightInfo, its endpoints (one per fragment) fetched in parallel threads
            first_rows = qc.read(
                demo, columns=["id", "name", "price"], filter="price > 100", limit=3
            )
            print(first_rows.to_pylist())

        # A scratch dataset: create it (overwrite, so the example can run twice).
        name = "quickstart"
        table = pa.table({"id": pa.array(range(10), pa.int64()), "x": [i * 1.5 for i in range(10)]})
        first = qc.write(name, table, mode="overwrite")
        print("created:", first)  # {"version": N, "rows": 10}

        # Staged writes: data files now, one atomic commit later (what Spark tasks do).
        staged = [qc.stage(name, table.slice(i, 5)) for i in (0, 5)]
        fragments = [f for part in staged for f in part]
        try:
            done = qc.commit(
                name,
                fragments,
                read_version=first["version"],
                idempotency_key="quickstart-demo",
            )
            print("committed:", done)
        except CommitConflict as e:
            print(f"lost a race ({e}); retryable={e.retryable}, winner={e.version}")
            qc.abort(name, fragments)

        # Filters and projections run on the server; versions stay readable.
        print("x > 6:", qc.read(name, columns=["id"], filter="x > 6").column("id").to_pylist())
        old = qc.read(name, version=first["version"])
        print(f"rows now: {qc.read(name).num_rows}, at version {first['version']}: {old.num_rows}")
        qc.create_tag(name, "initial", first["version"])
        qc.delete(name, "id < 3")
        print("versions:", [v["version"] for v in qc.versions(name)])
        print("tags:", qc.tags(name))
        print("rows at tag 'initial':", qc.read(name, tag="initial").num_rows)

        # Errors are typed, with the server's one-line message.
        try:
            qc.read("no_such_dataset")
        except NotFound as e:
            print("NotFound:", e)

        qc.drop_dataset(name)


if __name__ == "__main__":
    main(*sys.argv[1:2])
