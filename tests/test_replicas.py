"""Two `quiver serve` replicas on one S3 root (moto's S3 server over HTTP), sharing a ticket key.

What a deployment behind one address relies on: a FlightInfo planned by one replica is read
through the other, appends committed through both at once lose nothing, fragments staged on
one are committed through the other, and endpoints name both replicas, so a client whose
replica goes away in the middle of a stream reads the rest of the ticket from the other.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

import pyarrow.flight as fl  # noqa: E402
from moto_atomic import moto_s3  # noqa: E402

from quiver.clients import Client  # noqa: E402
from quiver.clients.errors import CommitConflict  # noqa: E402

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
TICKET_KEY = "replicas-share-this-ticket-key-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server with the bucket `replicas`."""
    with moto_s3("replicas") as endpoint:
        yield endpoint


class Replica:
    """One `quiver serve` process: its Flight URI, metrics port and process."""

    def __init__(self, uri: str, metrics_port: int, proc: subprocess.Popen, log: Path) -> None:
        self.uri = uri
        self.metrics_port = metrics_port
        self.proc = proc
        self.log = log

    def metrics(self) -> dict[str, float]:
        """The scraped samples, `name{labels}` → value."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def replicas(
    s3_endpoint: str, tmp_path: Path, *extra: str, count: int = 2
) -> Iterator[list[Replica]]:
    """`count` replicas on one fresh `s3://replicas/<prefix>` root, one ticket key, each
    advertising every replica's URI (in the same order)."""
    root = f"s3://replicas/{uuid.uuid4().hex[:10]}"
    ports = [_free_port() for _ in range(count)]
    uris = [f"grpc://127.0.0.1:{p}" for p in ports]
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "QUIVER_TICKET_KEY": TICKET_KEY,
        "QUIVER_S3_ENDPOINT_URL": s3_endpoint,
    }
    started: list[Replica] = []
    with ExitStack() as stack:
        for i, port in enumerate(ports):
            metrics_port = _free_port()
            log = tmp_path / f"replica-{i}.log"
            out = stack.enter_context(open(log, "wb"))
            args = [sys.executable, "-m", "quiver.flight_server", "serve", "--root", root,
                    "--port", str(port), "--metrics-port", str(metrics_port), "--exit-with-parent",
                    *[a for u in uris for a in ("--advertise", u)], *extra]  # fmt: skip
            proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=out)
            replica = Replica(uris[i], metrics_port, proc, log)
            started.append(replica)
            stack.callback(replica.stop)
        for replica in started:
            _wait_ready(replica)
        yield started


def _wait_ready(replica: Replica, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if replica.proc.poll() is not None:
            raise RuntimeError(f"replica exited: {replica.log.read_text()[-2000:]}")
        try:
            with fl.connect(replica.uri) as c:
                c.list_actions(fl.FlightCallOptions(timeout=2))
            return
        except fl.FlightError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{replica.uri} did not start") from None
            time.sleep(0.1)


def _rows(start: int, n: int, pad: int = 8) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "s": pc.utf8_lpad(pc.cast(ids, pa.string()), pad, "x")})


def test_flight_info_from_one_replica_is_read_through_the_other(s3_endpoint, tmp_path):
    with replicas(s3_endpoint, tmp_path) as (a, b), Client(a.uri) as qa:
        for i in range(3):
            qa.write("shared", _rows(i * 500, 500))
        info = qa.flight_info("shared")
        assert len(info.endpoints) == 3
        parts = []
        with fl.connect(b.uri) as raw_b:
            for endpoint in info.endpoints:
                # every endpoint names both replicas, in the same order on both
                assert [loc.uri.decode() for loc in endpoint.locations] == [a.uri, b.uri]
                parts.append(raw_b.do_get(endpoint.ticket).read_all())
        got = pa.concat_tables(parts)
        assert got.sort_by("id").equals(_rows(0, 1500))
        assert b.metrics()['quiver_requests_total{code="ok",rpc="DoGet"}'] == 3
        assert b.metrics()["quiver_streamed_rows_total"] == 1500
        # a ticket signed by another key is refused by both
        forged = info.endpoints[0].ticket.ticket[:-4] + b"AAAA"
        for uri in (a.uri, b.uri):
            with fl.connect(uri) as raw, pytest.raises(fl.FlightError):
                raw.do_get(fl.Ticket(forged)).read_all()


def test_appends_through_both_replicas_at_once_lose_nothing(s3_endpoint, tmp_path):
    writers, appends, rows = 4, 5, 200
    with replicas(s3_endpoint, tmp_path) as (a, b):
        with Client(a.uri) as qa:
            qa.write("busy", _rows(-1, 1), mode="create")
        errors: list[BaseException] = []
        conflicts = [0]
        go = threading.Barrier(writers)

        def writer(w: int) -> None:
            uri = (a, b)[w % 2].uri
            try:
                with Client(uri) as q:
                    go.wait()
                    for k in range(appends):
                        data = _rows((w * appends + k) * rows, rows)
                        for _attempt in range(20):
                            try:
                                q.write("busy", data)
                                break
                            except CommitConflict as e:  # retryable: the data was not committed
                                assert e.retryable
                                conflicts[0] += 1
                        else:
                            raise AssertionError("an append never committed")
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not errors, errors
        for replica in (a, b):
            with Client(replica.uri) as q:
                got = q.read("busy").sort_by("id")
                assert got.equals(_rows(-1, 1 + writers * appends * rows))
                assert len(q.versions("busy")) == 1 + writers * appends
        commits = sum(
            r.metrics().get('quiver_commits_total{operation="append"}', 0) for r in (a, b)
        )
        assert commits == writers * appends
        written = sum(r.metrics()["quiver_written_rows_total"] for r in (a, b))
        assert written == 1 + writers * appends * rows


def test_staged_on_one_replica_committed_through_the_other(s3_endpoint, tmp_path):
    with replicas(s3_endpoint, tmp_path) as (a, b), Client(a.uri) as qa, Client(b.uri) as qb:
        qa.write("etl", _rows(0, 100), mode="create")
        frags = qa.stage("etl", _rows(100, 300), job="job-1")
        frags += qa.stage("etl", _rows(400, 50), job="job-1")
        assert qb.read("etl").num_rows == 100  # staged: not visible on either
        done = qb.commit("etl", frags, idempotency_key="job-1-commit", job="job-1")
        assert done["version"] == 2 and done["rows"] == 350
        again = qa.commit("etl", frags, idempotency_key="job-1-commit", job="job-1")
        assert again.get("duplicate") is True and again["version"] == 2
        assert qa.read("etl").sort_by("id").equals(_rows(0, 450))
        staged = a.metrics()["quiver_staged_fragments_total"]
        assert staged == len(frags) == 2
        assert b.metrics()['quiver_commits_total{operation="append"}'] == 1


@pytest.mark.parametrize("how", ["killed", "terminated"])
def test_a_read_fails_over_when_its_replica_goes_away(s3_endpoint, tmp_path, how):
    """Replica A dies (SIGKILL) or shuts down without drain time (SIGTERM, --drain-seconds 0)
    while a client streams from it: the client reads the rest of that ticket, and the
    following endpoints, from B, and gets every row once."""
    per_fragment, fragments = 250_000, 2
    extra = ("--batch-size", "4096", "--drain-seconds", "0")
    with replicas(s3_endpoint, tmp_path, *extra) as (a, b):
        with Client(a.uri) as qa:
            for i in range(fragments):
                qa.write("big", _rows(i * per_fragment, per_fragment, pad=40))
        with Client(a.uri) as q:
            reader = q.reader("big")
            batches = [reader.read_next_batch()]  # A is streaming the first endpoint
            assert batches[0].num_rows < per_fragment
            a.stop(signal.SIGKILL if how == "killed" else signal.SIGTERM)
            for batch in reader:
                batches.append(batch)
        got = pa.Table.from_batches(batches)
        ids = got["id"]
        assert got.num_rows == per_fragment * fragments
        assert pc.count_distinct(ids).as_py() == got.num_rows  # every row once
        assert pc.min(ids).as_py() == 0 and pc.max(ids).as_py() == got.num_rows - 1
        # B served the rest of the interrupted ticket and the whole second endpoint
        m = b.metrics()
        assert m['quiver_requests_total{code="ok",rpc="DoGet"}'] == fragments
        assert 0 < m["quiver_streamed_rows_total"] < per_fragment * fragments + per_fragment
