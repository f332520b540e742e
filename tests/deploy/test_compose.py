"""deploy/compose.yaml: valid against the Compose specification's JSON schema, and wired the
way replicas must be (one s3:// root, one ticket key, one auth file, both advertised)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from deploy_helpers import DEPLOY, REPO, dockerfile_stages

from quiver.flight_server.auth import Authenticator
from quiver.flight_server.config import ServerConfig


def _compose_schema() -> dict:
    """The Compose specification's schema, as check-jsonschema vendors it."""
    from check_jsonschema import builtin_schemas

    path = Path(builtin_schemas.__file__).parent / "vendor" / "compose-spec.json"
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_valid_against_the_compose_spec(compose):
    schema = _compose_schema()
    assert "compose" in schema.get("$id", "") + schema.get("title", "").lower()
    jsonschema.validate(compose, schema)  # YAML merge keys (<<) already resolved


def test_the_schema_refuses_mistakes(compose):
    schema = _compose_schema()
    for mutate in (
        lambda c: c["services"]["quiver-1"].update(portz=["8815:8815"]),
        lambda c: c["services"]["minio"].update(healthcheck={"tset": ["CMD", "true"]}),
        lambda c: c["services"]["spark-job"]["depends_on"]["quiver-1"].update(condition="up"),
    ):
        bad = copy.deepcopy(compose)
        mutate(bad)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_the_check_jsonschema_command_agrees():
    from check_jsonschema.cli.main_command import main

    with pytest.raises(SystemExit) as done:
        main(["--builtin-schema", "vendor.compose-spec", str(DEPLOY / "compose.yaml")])
    assert done.value.code == 0


def test_replicas_share_root_ticket_key_and_auth_and_advertise_each_other(compose):
    services = compose["services"]
    replicas = {name: s for name, s in services.items() if name.startswith("quiver-")}
    assert sorted(replicas) == ["quiver-1", "quiver-2"]
    envs = [s["environment"] for s in replicas.values()]
    assert envs[0] == envs[1]
    env = envs[0]
    assert env["QUIVER_ROOT"].startswith("s3://")
    assert env["QUIVER_S3_ENDPOINT_URL"] == "http://minio:9000"
    advertised = env["QUIVER_ADVERTISE"].split(",")
    assert advertised == [f"grpc://{name}:8815" for name in replicas]
    for s in replicas.values():
        assert set(s["secrets"]) == {"ticket_key", "auth_file"}
        assert s["build"]["target"] == "quiver" and s["stop_signal"] == "SIGTERM"
    # the bucket's owner is the replicas' S3 user, and the setup job creates the bucket
    minio = services["minio"]["environment"]
    assert env["AWS_ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"]
    bucket = env["QUIVER_ROOT"].split("/")[2]
    assert f"store/{bucket}" in services["minio-setup"]["entrypoint"][-1]
    # the settings parse as `quiver serve` would read them (files from the secrets)
    secrets = {name: DEPLOY / s["file"] for name, s in compose["secrets"].items()}
    files = {f"/run/secrets/{name}": str(path) for name, path in secrets.items()}
    local = {k: files.get(v, v) for k, v in env.items()}
    config = ServerConfig.from_args([], env=local)
    assert config.ticket_key is not None and len(config.ticket_key) >= 16
    assert config.advertise == tuple(advertised)
    assert config.storage_options["client_kwargs"]["endpoint_url"] == "http://minio:9000"


def test_the_auth_file_admits_the_spark_job(compose):
    job = compose["services"]["spark-job"]
    secrets = {name: DEPLOY / s["file"] for name, s in compose["secrets"].items()}
    password = secrets["pipeline_password"].read_text().strip()
    auth = Authenticator(str(secrets["auth_file"]))
    user = job["environment"]["QUIVER_USER"]
    identity = auth.check_password(user, password)
    assert identity.may("read", "orders") and identity.may("write", "revenue_by_category_city")
    with pytest.raises(Exception) as refused:  # noqa: PT011 - the code is checked below
        auth.check_password(user, password + "x")
    assert refused.value.code == "unauthenticated"  # type: ignore[attr-defined]
    assert job["environment"]["QUIVER_PASSWORD_FILE"] == "/run/secrets/pipeline_password"
    assert job["environment"]["QUIVER_URI"] == "grpc://quiver-1:8815"
    for name in ("quiver-1", "quiver-2"):
        assert job["depends_on"][name]["condition"] == "service_healthy"
    stages = {s.name: s for s in dockerfile_stages()}
    assert job["build"]["target"] in stages
    entrypoint = json.loads(stages[job["build"]["target"]].args("ENTRYPOINT")[0])
    assert entrypoint[-1] == "/opt/quiver-job/spark_job.py"


def test_prometheus_scrapes_both_replicas(compose):
    prometheus = compose["services"]["prometheus"]
    mount = next(v for v in prometheus["volumes"] if "prometheus.yml" in v)
    config = yaml.safe_load((DEPLOY / mount.split(":")[0]).read_text())
    (job,) = config["scrape_configs"]
    targets = job["static_configs"][0]["targets"]
    final = {s.name: s for s in dockerfile_stages()}["quiver"]
    env = dict(pair.split("=", 1) for line in final.args("ENV") for pair in line.split())
    assert targets == [f"quiver-{i}:{env['QUIVER_METRICS_PORT']}" for i in (1, 2)]
    assert job["metrics_path"] == "/metrics"


def test_the_spark_job_script_runs_the_pipeline_example():
    source = (DEPLOY / "compose/spark_job.py").read_text()
    compile(source, "spark_job.py", "exec")
    assert (REPO / "clients/spark/examples/pipeline.py").exists()
    for used in ("pipeline.run(", "pipeline.run_streaming(", "pipeline.session(", "report("):
        assert used in source
