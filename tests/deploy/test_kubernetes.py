"""deploy/kubernetes/: every manifest valid against the Kubernetes schemas (offline, strict:
unknown fields refused), the kustomization complete, and the settings consistent."""

from __future__ import annotations

import copy
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml
from deploy_helpers import DEPLOY, dockerfile_stages

from quiver.flight_server.config import ServerConfig, parse_size

K8S = DEPLOY / "kubernetes"
VERSION = "1.33.0"  # native grpc probes (1.27), sleep preStop hooks (1.30) and later


def _documents() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for _, d in _documents()}


@pytest.mark.parametrize("name,doc", _documents(), ids=lambda v: v if isinstance(v, str) else "")
def test_manifest_is_valid(name, doc):
    kubernetes_validate.validate(doc, VERSION, strict=True)


def test_the_validator_refuses_mistakes(docs):
    deployment = docs["Deployment/quiver"]
    for mutate in (
        lambda d: d["spec"].update(replicaz=2),
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["grpc"].update(
            port="health"  # grpc probes take a number
        ),
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].update(
            memory=[512]
        ),
    ):
        bad = copy.deepcopy(deployment)
        mutate(bad)
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, VERSION, strict=True)


def test_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    listed = set(kustomization["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    image = {i["name"] for i in kustomization["images"]}
    deployment = yaml.safe_load((K8S / "deployment.yaml").read_text())
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] in image


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
def test_kustomize_build_is_valid():
    built = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=120
    )
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    assert len(docs) == len(_documents())
    for doc in docs:
        kubernetes_validate.validate(doc, VERSION, strict=True)
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "quiver"


def test_deployment_probes_resources_and_security(docs):
    deployment = docs["Deployment/quiver"]
    pod = deployment["spec"]["template"]
    spec = pod["spec"]
    (container,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    config = docs["ConfigMap/quiver"]["data"]
    assert deployment["spec"]["replicas"] == 2
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"flight": 8815, "health": 8816, "metrics": 8817}
    assert int(env["QUIVER_HEALTH_PORT"]) == ports["health"]
    assert int(env["QUIVER_METRICS_PORT"]) == ports["metrics"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["grpc"]["port"] == ports["health"]
    assert container["readinessProbe"]["grpc"]["service"] == "arrow.flight.protocol.FlightService"
    # the grace period covers the preStop pause and the whole drain
    drain = float(config["QUIVER_DRAIN_SECONDS"])
    pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert spec["terminationGracePeriodSeconds"] > drain + pause
    # a memory limit with room for the stream budget
    limit = parse_size(container["resources"]["limits"]["memory"].replace("Mi", "MiB"))
    assert limit >= parse_size(config["QUIVER_MEMORY_BUDGET"]) + 300 * 1000 * 1000
    # non-root (the image's user), read-only root, nothing extra
    final = {s.name: s for s in dockerfile_stages()}["quiver"]
    uid = int(final.args("USER")[0].split(":")[0])
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == uid
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    # scrape annotations point at the metrics port
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == ports["metrics"]


def test_service_pdb_and_secrets_match_the_pods(docs):
    labels = docs["Deployment/quiver"]["spec"]["template"]["metadata"]["labels"]
    service = docs["Service/quiver"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert {p["name"] for p in service["spec"]["ports"]} == {"flight", "metrics"}
    pdb = docs["PodDisruptionBudget/quiver"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["minAvailable"] == 1
    # what replicas share: root (ConfigMap), ticket key and auth file (Secret)
    config = docs["ConfigMap/quiver"]["data"]
    assert config["QUIVER_ROOT"].startswith("s3://")
    assert config["QUIVER_ADVERTISE"] == "grpc://quiver.quiver.svc:8815"
    secret = docs["Secret/quiver"]["stringData"]
    assert len(secret["ticket-key"].encode()) >= 16
    assert docs["Secret/quiver-tls"]["type"] == "kubernetes.io/tls"
    # the settings parse as `quiver serve` reads them
    (container,) = docs["Deployment/quiver"]["spec"]["template"]["spec"]["containers"]
    env = {**config, **{e["name"]: e["value"] for e in container["env"] if "value" in e}}
    env.pop("QUIVER_TICKET_KEY_FILE")  # a mounted file in the pod
    env.pop("QUIVER_AUTH_FILE")
    parsed = ServerConfig.from_args([], env=env)
    assert parsed.health_port == 8816 and parsed.metrics_port == 8817
    assert parsed.drain_seconds == float(config["QUIVER_DRAIN_SECONDS"])
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    for var in ("QUIVER_TICKET_KEY_FILE", "QUIVER_AUTH_FILE"):
        path = next(e["value"] for e in container["env"] if e["name"] == var)
        assert path.rsplit("/", 1)[0] in mounts
