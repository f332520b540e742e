"""The compose file's Spark job (deploy/compose/spark_job.py) against a server that requires a
login, with the compose file's own auth file, ticket key and the job's password file."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from deploy_helpers import DEPLOY, REPO

pytest.importorskip("pyspark")
pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


def test_the_spark_job_logs_in_seeds_and_runs_the_pipeline(tmp_path):
    sys.path.insert(0, str(REPO / "tests" / "flight"))
    from server_process import quiver_serve

    from quiver.clients import Client
    from quiver.clients.errors import Unauthenticated

    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    secrets = {name: str(DEPLOY / s["file"]) for name, s in compose["secrets"].items()}
    job_env = compose["services"]["spark-job"]["environment"]
    args = ("--auth-file", secrets["auth_file"], "--ticket-key-file", secrets["ticket_key"])
    with quiver_serve(tmp_path, *args) as (uri, _pid):
        with Client(uri) as anonymous, pytest.raises(Unauthenticated):
            anonymous.datasets()
        env = {
            **os.environ,
            "QUIVER_URI": uri,
            "QUIVER_USER": job_env["QUIVER_USER"],
            "QUIVER_PASSWORD_FILE": secrets["pipeline_password"],
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        run = subprocess.run(
            [sys.executable, str(DEPLOY / "compose" / "spark_job.py")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=360,
        )
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
        assert "revenue_by_category_city: " in run.stdout
        assert "orders_enriched: " in run.stdout
        user = {"username": job_env["QUIVER_USER"]}
        with open(secrets["pipeline_password"]) as f:
            user["password"] = f.read().strip()
        with Client(uri, **user) as q:
            names = set(q.datasets())
            assert {"demo", "orders", "revenue_by_category_city", "orders_enriched"} <= names
            assert q.read("revenue_by_category_city").num_rows > 0
