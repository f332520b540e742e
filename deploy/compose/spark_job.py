"""The Spark job of deploy/compose.yaml: the pipeline example (clients/spark/examples/pipeline.py)
against the Quiver replicas, which require a login.

    python spark_job.py [--uri grpc://quiver-1:8815] [--mode batch|streaming|both]

Settings from the environment: QUIVER_URI, QUIVER_USER and QUIVER_PASSWORD (or
QUIVER_PASSWORD_FILE). The example itself takes no credentials, so this job registers the
`quiver` data source with them as default options, and gives them to the Python client the
example uses for its set-up calls. It first creates the example's datasets (`demo` and
`orders`, from `flight_server.demo`) through Quiver if the root has none.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The image keeps the example at its path in the source tree (it finds the repo from there).
for candidate in (HERE / "clients/spark/examples", HERE.parents[1] / "clients/spark/examples"):
    if (candidate / "pipeline.py").exists():
        sys.path.insert(0, str(candidate))
        break


def credentials() -> dict[str, str]:
    """username and password from QUIVER_USER and QUIVER_PASSWORD(_FILE); {} without a user."""
    user = os.environ.get("QUIVER_USER")
    if not user:
        return {}
    password = os.environ.get("QUIVER_PASSWORD")
    if password is None and os.environ.get("QUIVER_PASSWORD_FILE"):
        password = Path(os.environ["QUIVER_PASSWORD_FILE"]).read_text().strip()
    if password is None:
        raise SystemExit("QUIVER_USER is set but neither QUIVER_PASSWORD nor QUIVER_PASSWORD_FILE")
    return {"username": user, "password": password}


def with_credentials(creds: dict[str, str]) -> None:
    """Make the example's clients log in: the Python client, and the data source's options."""
    from quiver import clients
    from quiver.clients.flight import Client

    class LoggedInClient(Client):
        def __init__(self, uri: Any, **kwargs: Any) -> None:
            if kwargs.get("token") is None and kwargs.get("username") is None:
                kwargs.update(creds)
            super().__init__(uri, **kwargs)

    clients.Client = LoggedInClient  # the example imports it from `clients` when it runs


def register_logged_in(spark: Any, creds: dict[str, str]) -> None:
    """Register `quiver` again as the same data source with the credentials as defaults."""
    from quiver.clients.spark import QuiverDataSource

    class LoggedInQuiver(QuiverDataSource):
        def __init__(self, options: Any) -> None:
            merged = dict(options)
            for key, value in creds.items():
                merged.setdefault(key, value)
            super().__init__(merged)

    spark.dataSource.register(LoggedInQuiver)


def seed(uri: str) -> None:
    """Create the example's datasets through Quiver when they are missing."""
    from quiver import clients
    from quiver.flight_server.demo import DEMO_NAME, ORDERS_NAME, demo_table, orders_table

    with clients.Client(uri) as qc:
        present = set(qc.datasets())
        if DEMO_NAME not in present:
            qc.write(DEMO_NAME, demo_table(), mode="create")
        if ORDERS_NAME not in present:
            qc.write(ORDERS_NAME, orders_table(), mode="create")


def wait_for(uri: str, timeout: float = 120.0) -> None:
    """Until the server answers its healthcheck action."""
    from quiver import clients

    deadline = time.monotonic() + timeout
    while True:
        try:
            with clients.Client(uri, timeout=5) as qc:
                qc.healthcheck()
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--uri", default=os.environ.get("QUIVER_URI", "grpc://quiver-1:8815"))
    parser.add_argument("--mode", choices=("batch", "streaming", "both"), default="both")
    args = parser.parse_args(argv)
    creds = credentials()
    if creds:
        with_credentials(creds)
    wait_for(args.uri)
    seed(args.uri)

    import pipeline

    spark = pipeline.session("quiver-compose-job")
    try:
        if creds:
            register_logged_in(spark, creds)
        print(f"pipeline against {args.uri}")
        if args.mode in ("batch", "both"):
            pipeline.report(pipeline.run(spark, args.uri))
        if args.mode in ("streaming", "both"):
            with tempfile.TemporaryDirectory() as checkpoint:
                result = pipeline.run_streaming(spark, args.uri, checkpoint)
                print(f"{pipeline.STREAM_RESULT}: {result.count()} rows")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
