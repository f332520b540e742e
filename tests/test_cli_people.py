"""The `quiver` commands for people, on a local root and through a real `quiver serve`:
the same answers either way (checked against the engine), tables for people and JSON for
scripts, errors as one line and exit code 1."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from quiver.format.dataset import dataset
from tests.flight.server_process import quiver_serve

ROOT = Path(__file__).resolve().parents[1]


def quiver(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "quiver", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def ok(*args: str) -> str:
    done = quiver(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "data"
    root.mkdir()
    subprocess.run(
        [sys.executable, "-m", "quiver", "demo", "--root", str(root)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return root


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[str]:
    with quiver_serve(root) as (uri, _pid):
        yield uri


def test_ls_lists_the_same_datasets_locally_and_on_a_server(root: Path, server: str) -> None:
    local = json.loads(ok("ls", str(root), "--json"))
    remote = json.loads(ok("ls", server, "--json"))
    assert local == remote
    assert {d["dataset"]: d["rows"] for d in local} == {"demo": 5000, "orders": 20000}
    text = ok("ls", str(root))
    assert text.splitlines()[0].split() == ["dataset", "version", "rows", "fragments"]
    assert "orders" in text and "20000" in text


def test_describe_versions_and_head_agree_with_the_engine(root: Path, server: str) -> None:
    path = str(root / "demo.lance")
    local = json.loads(ok("describe", path, "--json"))
    remote = json.loads(ok("describe", f"{server}/demo", "--json"))
    assert local == remote
    engine = dataset(path)
    assert local["rows"] == engine.count_rows() and local["version"] == engine.version
    assert [f["name"] for f in local["schema"]] == engine.schema.names
    args = ["-n", "4", "--columns", "id,price", "--filter", "price > 50", "--json"]
    want = engine.to_table(columns=["id", "price"], filter="price > 50", limit=4).to_pylist()
    assert json.loads(ok("head", path, *args)) == want
    assert json.loads(ok("head", f"{server}/demo", *args)) == want
    text = ok("head", path, "-n", "2", "--columns", "id,name")
    assert text.splitlines()[0].split() == ["id", "name"] and "(2 row(s))" in text
    assert json.loads(ok("versions", f"{server}/demo", "--json"))[0]["version"] == 1
    assert json.loads(ok("tags", path, "--json")) == {}


def test_changes_through_the_commands(root: Path, server: str) -> None:
    path = str(root / "orders.lance")
    before = dataset(path).count_rows()
    matching = dataset(path).count_rows("status = 'returned'")
    done = json.loads(ok("delete", f"{server}/orders", "--where", "status = 'returned'", "--json"))
    assert done["deleted_rows"] == matching
    assert dataset(path).count_rows() == before - matching
    assert "fragment(s) rewritten" in ok("compact", path, "--target-rows", "100000")
    assert dataset(path).count_rows() == before - matching
    cleaned = json.loads(ok("cleanup", path, "--older-than", "0s", "--json"))
    assert cleaned["old_versions"] >= 1
    assert dataset(path).to_table().num_rows == before - matching


@pytest.mark.parametrize(
    "args, message",
    [
        (["describe", "nowhere/nope.lance"], "does not exist"),
        (["describe", "a-directory"], "name a dataset"),
        (["head", "DEMO", "--filter", "nope > 1"], "nope"),
        (["cleanup", "DEMO", "--older-than", "soon"], "not a duration"),
        (["describe", "SERVER/nope"], "does not exist"),
        (["describe", "SERVER"], "name a dataset"),
    ],
)
def test_errors_are_one_line_and_exit_1(root: Path, server: str, args, message) -> None:
    args = [a.replace("DEMO", str(root / "demo.lance")).replace("SERVER", server) for a in args]
    done = quiver(*args)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.startswith("quiver: ") and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_command_line_that_does_not_parse_exits_2() -> None:
    done = quiver("head")
    assert done.returncode == 2 and "usage:" in done.stderr
    assert "head" in ok("--help") and "serve" in ok("--help")


def test_every_command_has_help() -> None:
    from quiver.cli import PEOPLE

    for command in PEOPLE:
        assert "usage: quiver " + command in ok(command, "--help")


def _with_terminal_stderr(*args: str) -> tuple[int, str, str]:
    """Run `quiver` with stderr on a pseudo-terminal, as a person at a terminal sees it."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    main, replica = pty.openpty()
    # a terminal's size, as a person's has (tqdm draws its bar to the width)
    fcntl.ioctl(replica, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "quiver", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=replica,
            text=True,
            timeout=120,
        )
        os.close(replica)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the writing side is closed and everything was read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(main)
    return done.returncode, done.stdout, b"".join(chunks).decode()


def test_progress_shows_on_a_terminal_only(server: str) -> None:
    code, out, err = _with_terminal_stderr("head", f"{server}/demo", "-n", "5")
    assert code == 0 and "(5 row(s))" in out
    assert "reading demo" in err and "endpoints" in err  # the read's progress line
    code, out, err = _with_terminal_stderr("head", f"{server}/demo", "-n", "5", "--no-progress")
    assert code == 0 and err == ""
    code, out, err = _with_terminal_stderr("head", f"{server}/demo", "-n", "5", "--json")
    assert code == 0 and len(json.loads(out)) == 5 and err == ""
    done = quiver("head", f"{server}/demo", "-n", "5")  # stderr a pipe: nothing on it
    assert done.returncode == 0 and done.stderr == ""


def test_elapsed_shows_the_time_so_far_and_erases_itself(monkeypatch) -> None:
    import io
    import time

    from quiver.clients.progress import Elapsed

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with Elapsed(True, "compact sales", interval=0.05):
        time.sleep(0.3)
    text = err.getvalue()
    assert "\rcompact sales... 0." in text and text.endswith("\r")
    assert text.rstrip("\r").endswith(" ")  # the last line is blanked out
    with Elapsed(False, "compact sales", interval=0.05):
        time.sleep(0.1)
    assert err.getvalue() == text
