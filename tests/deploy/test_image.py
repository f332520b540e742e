"""The image's install steps, run here as the Dockerfile runs them (no container engine here).

The build stage runs deploy/image/build-wheel.sh on the build context and the next stage
deploy/image/install.sh on the wheel; this test runs the same two scripts on a copy of the
context (what .dockerignore lets through) into a fresh virtual environment, then uses the
installed `quiver` (from outside the checkout, so nothing is imported from it) with the
image's QUIVER_* settings: `quiver serve --help`, the demo datasets, a served read, the
health port and the metrics endpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
from deploy_helpers import DEPLOY, copy_build_context, dockerfile_stages

pytestmark = pytest.mark.slow


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment without this checkout's virtual environment or paths in it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUIVER_", "PYTHON"))}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p
    )
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The virtual environment the image's scripts make, as the Dockerfile runs them."""
    work = tmp_path_factory.mktemp("image")
    context, wheels, venv = work / "src", work / "wheels", work / "opt-quiver"
    copied = copy_build_context(context)
    assert "format/_kernels.c" in copied and not any(p.startswith(".venv/") for p in copied)
    env = _clean_env(PYTHON=sys.executable)  # the image's python3, here the test's
    run = subprocess.run(
        ["sh", str(context / "deploy/image/build-wheel.sh"), str(context), str(wheels)],
        cwd=context,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    built = list(wheels.glob("quiver_lance-*.whl"))
    assert len(built) == 1 and "linux" in built[0].name  # with the compiled kernels
    with zipfile.ZipFile(built[0]) as wheel:  # one top-level package: no `format`, `clients`...
        tops = {
            n.split("/")[0] for n in wheel.namelist() if not n.split("/")[0].endswith(".dist-info")
        }
    assert tops == {"quiver"}, tops
    run = subprocess.run(
        ["sh", str(DEPLOY / "image/install.sh"), str(wheels), str(venv)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return venv


def test_the_dockerfile_runs_these_scripts():
    stages = {s.name: s for s in dockerfile_stages()}
    assert any(
        "sh deploy/image/build-wheel.sh /src /wheels" in r for r in stages["build"].args("RUN")
    )
    copy = stages["base"].args("COPY")
    assert "deploy/image/install.sh /usr/local/lib/quiver-install.sh" in copy
    assert any("quiver-install.sh /wheels /opt/quiver" in r for r in stages["base"].args("RUN"))


def test_installed_quiver_serve_help(installed, tmp_path):
    run = subprocess.run(
        [str(installed / "bin/quiver"), "serve", "--help"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    for flag in ("--root", "--metrics-port", "--health-port", "--drain-seconds", "--auth-file"):
        assert flag in run.stdout


def test_installed_wheel_serves_a_read(installed, tmp_path):
    python = str(installed / "bin/python")
    where = subprocess.run(
        [python, "-c", "import quiver, quiver.format._kernels as k; "
         "import quiver.flight_server._threadstate as t, quiver.flight_server._grpcstatus as g; "
         "import quiver.flight_server.grpc_status as s; assert s.install(); "
         "import importlib.util as u; assert not any(u.find_spec(n) for n in "
         "('format', 'flight_server', 'clients', 'wire')); "
         "print(quiver.__file__); print(k.__file__); print(t.__file__); print(g.__file__)"],
        cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    for line in where.stdout.split():
        assert line.startswith(str(installed)), line  # the wheel's, not the checkout's

    final = {s.name: s for s in dockerfile_stages()}["quiver"]
    image_env = dict(pair.split("=", 1) for line in final.args("ENV") for pair in line.split())
    port, health, metrics = _free_port(), _free_port(), _free_port()
    env = _clean_env(
        **{
            **image_env,
            "PATH": f"{installed / 'bin'}{os.pathsep}{_clean_env()['PATH']}",  # as the image's
            "QUIVER_HOST": "127.0.0.1",  # the image binds 0.0.0.0: loopback only here
            "QUIVER_ROOT": str(tmp_path / "data"),
            "QUIVER_PORT": str(port),
            "QUIVER_HEALTH_PORT": str(health),
            "QUIVER_METRICS_PORT": str(metrics),
            "QUIVER_DRAIN_SECONDS": "2",
        }
    )
    demo = subprocess.run(
        ["quiver", "demo"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert demo.returncode == 0, demo.stderr
    entrypoint = ["quiver", "serve"]  # the image's ENTRYPOINT, no arguments
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115
    server = subprocess.Popen(entrypoint, cwd=tmp_path, env=env, stdout=log, stderr=log)
    try:
        read = textwrap.dedent(
            f"""
            import sys, time
            from quiver.clients import Client
            deadline = time.monotonic() + 60
            while True:
                try:
                    with Client("grpc://127.0.0.1:{port}", timeout=5) as q:
                        q.healthcheck()
                        table = q.read("demo")
                        orders = q.read("orders", columns=["order_id"], filter="quantity > 2")
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            print(table.num_rows, orders.num_rows > 0)
            """
        )
        run = subprocess.run(
            [python, "-c", read], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
        )
        assert run.returncode == 0, run.stderr[-3000:] + (tmp_path / "serve.log").read_text()
        assert run.stdout.split() == ["5000", "True"]
        # the compose healthcheck's command, with this interpreter, against the health port
        probe = _compose_healthcheck().replace("127.0.0.1:8816", f"127.0.0.1:{health}")
        check = subprocess.run([python, "-c", probe], env=env, capture_output=True, timeout=60)
        assert check.returncode == 0, check.stderr
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read()
        assert b'quiver_requests_total{code="ok",rpc="DoGet"}' in text
        server.send_signal(signal.SIGTERM)  # the image's STOPSIGNAL: drain, then exit 0
        assert server.wait(timeout=60) == 0
        time.sleep(0.1)
        check = subprocess.run([python, "-c", probe], env=env, capture_output=True, timeout=60)
        assert check.returncode != 0  # nothing serves any more
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()


def _compose_healthcheck() -> str:
    import yaml

    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    test = compose["services"]["quiver-1"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    return test[3]
