"""The server killed with SIGKILL at random points of each kind of commit: appends, merges,
updates, deletes, compaction, index builds and cleanup. After each kill the server starts
again and the client sends the same request, with the same idempotency key: every change
lands exactly once, the rows are what the changes make them in both engines, every version
left reads in pylance, and cleanup leaves only the files the versions reference.

`QUIVER_KILL_TRIALS` sets the number of trials (14 by default, two per kind; the nightly
size is 140)."""

from __future__ import annotations

import datetime
import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow.compute as pc
import pytest
from commit_kinds import KINDS, Model

from quiver.clients import Client
from quiver.format.dataset import dataset

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
TRIALS = int(os.environ.get("QUIVER_KILL_TRIALS", "14"))

# Imports the server (and s3fs) once, then forks one server per trial (a fresh interpreter
# per start spent a second importing): the parent prints each child's pid and how it ended.
# The CLI imports the server's modules only when it serves, so they are imported here: each
# child spent 1.7 s importing them itself. numpy's and pyarrow's threads started by these
# imports are their libraries' own, which fork handles; nothing else runs before the fork.
_SERVERS = textwrap.dedent(
    """
    import os, sys
    from quiver.flight_server.cli import main
    import quiver.flight_server.health, quiver.flight_server.server
    root, port = sys.argv[1], sys.argv[2]
    if root.startswith("s3://"):
        import s3fs  # the server's S3 filesystem, imported once too
    print("ready", flush=True)
    for _ in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                main(["serve", "--root", root, "--host", "127.0.0.1", "--port", port])
            finally:
                os._exit(1)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print("killed" if os.WIFSIGNALED(status) else f"exited {status}", flush=True)
    """
)


class Servers:
    """Starts the server on one port, and kills it."""

    def __init__(self, root: str, env: dict[str, str]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.uri = f"grpc://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVERS, root, str(self.port)],
            cwd=ROOT,
            env={**os.environ, **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"
        self.pid = 0

    def start(self) -> Client:
        """A new server, and a client of it once it answers."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        self.pid = int(self.proc.stdout.readline())
        deadline = time.monotonic() + 60
        while True:
            try:
                client = Client(self.uri)
                client.healthcheck()
                return client
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc.stdout is not None
        os.kill(self.pid, signal.SIGKILL)
        assert self.proc.stdout.readline().strip() == "killed"

    def close(self) -> None:
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.kill()
        self.proc.wait(timeout=30)


def _run(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """`call()` in a thread; its answer or error, then the seconds it took, in the list."""
    out: list[Any] = []

    def target() -> None:
        start = time.monotonic()
        try:
            out.append(call())
        except Exception as e:
            out.append(e)
        out.append(time.monotonic() - start)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


class Storage:
    """Where the datasets are: the root, and options for Quiver and pylance."""

    def __init__(self, root: str, options: dict[str, Any] | None = None, lance_options=None):
        self.root, self.options, self.lance_options = root, options, lance_options

    def files(self, uri: str) -> set[str]:
        """The names of the data files under a dataset."""
        if self.options is None:
            return {p.name for p in (Path(uri) / "data").iterdir()}
        import s3fs

        fs = s3fs.S3FileSystem(**self.options)
        return {p.rsplit("/", 1)[1] for p in fs.ls(uri.removeprefix("s3://") + "/data")}


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "local":
        yield Storage(str(tmp_path))
        return
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from moto_atomic import moto_s3

    with moto_s3("kills") as endpoint:
        yield Storage(
            "s3://kills/root",
            {
                "key": "testing",
                "secret": "testing",
                "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
            },
            {
                "aws_access_key_id": "testing",
                "aws_secret_access_key": "testing",
                "aws_endpoint": endpoint,
                "aws_region": "us-east-1",
                "allow_http": "true",
            },
        )


def test_server_killed_during_every_kind_of_commit(storage: Storage, tmp_path: Path) -> None:
    env = {"QUIVER_STORAGE_OPTIONS": json.dumps(storage.options)} if storage.options else {}
    # a killed server leaves its staged uploads behind: in this test's directory, not /tmp
    (tmp_path / "server-tmp").mkdir(exist_ok=True)
    env["TMPDIR"] = str(tmp_path / "server-tmp")
    servers = Servers(storage.root, env)
    path = f"{storage.root}/t.lance"
    ours_options = {"storage_options": storage.options} if storage.options else {}
    theirs_options = {"storage_options": storage.lance_options} if storage.options else {}
    model = Model(3000)
    rng = random.Random(7)
    # per kind: how long a request takes (kills land at random points within it), and how
    # the trials ended
    took = dict.fromkeys(KINDS, 0.05)
    outcomes: dict[str, int] = {}
    try:
        client = servers.start()
        client.write("t", model.table(), mode="create")
        for trial in range(TRIALS):
            name = list(KINDS)[trial % len(KINDS)]
            request = KINDS[name](model, trial)
            key = f"trial-{trial}"
            thread, answer = _run(
                lambda request=request, client=client, key=key: request(client, key, 0)
            )
            # half the kills anywhere in the request, half near its end, where it commits
            late = rng.random() < 0.5
            time.sleep(took[name] * (rng.uniform(0.8, 1.05) if late else rng.uniform(0, 1.2)))
            servers.kill()
            thread.join(timeout=60)
            client.close()
            client = servers.start()
            # the same request again: a change that landed before the kill is not made twice
            start = time.monotonic()
            again = request(client, key, 0)
            if not isinstance(answer[0], Exception):
                outcome = "answered before the kill"
                took[name] = answer[1]
            elif isinstance(again, dict) and again.get("duplicate"):
                outcome = "landed, answer lost"
            else:
                outcome = "killed, then made by the retry"
                took[name] = time.monotonic() - start
            outcomes[f"{name}: {outcome}"] = outcomes.get(f"{name}: {outcome}", 0) + 1
            expected = model.table()
            ours = dataset(path, **ours_options).to_table(columns=["id", "v"]).sort_by("id")
            theirs = lance.dataset(path, **theirs_options).to_table(columns=["id", "v"])
            theirs = theirs.sort_by("id")
            assert ours.equals(expected), f"trial {trial} ({name}): Quiver's rows"
            assert theirs.equals(expected), f"trial {trial} ({name}): pylance's rows"
            served = client.read("t", columns=["id", "v"]).sort_by("id")
            assert served.equals(expected), f"trial {trial} ({name}): the server's rows"
            # through the BTREE index once one is built
            few = client.read("t", columns=["id", "v"], filter="id < 500").sort_by("id")
            assert few.equals(expected.filter(pc.less(expected["id"], 500))), trial
        for v in lance.dataset(path, **theirs_options).versions():
            version = v["version"]
            n = lance.dataset(path, version=version, **theirs_options).count_rows()
            assert dataset(path, version=version, **ours_options).count_rows() == n, version
        client.close()
    finally:
        servers.close()
    # what the killed commits left behind is removable by cleanup, and nothing else goes
    ds = dataset(path, **ours_options)
    rows = ds.to_table().sort_by("id")
    ds.cleanup_old_versions(older_than=datetime.timedelta(0), delete_unverified=True)
    fragments = dataset(path, **ours_options).get_fragments()
    assert storage.files(path) == {df.path for f in fragments for df in f.data_files()}
    assert lance.dataset(path, **theirs_options).to_table().sort_by("id").equals(rows)
    print(sorted(outcomes.items()))
