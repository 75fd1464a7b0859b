"""deploy/ checked offline against the Kubernetes OpenAPI schemas, and on a real kube-apiserver
v1.20.2 (tests/kubernetes/cluster.py): what it applies, and RBAC with each ServiceAccount's own
token.

- Offline: every object `kubectl kustomize` renders from deploy/base and both overlays validates
  against kubernetes-validate's strict schemas (unknown fields are errors) of Kubernetes 1.32 (the
  kubectl of this machine) and of the newest version the package bundles. Custom resources have no
  bundled schema: the WorkerPool is checked by the API server against its own CRD instead
  (`test_the_rendered_objects_apply_...`); the Prometheus operator's ServiceMonitor and PodMonitor
  and cert-manager's Issuer and Certificate have no schema on this machine at all, so what they
  point at and what the processes mount from them is checked instead (`test_the_monitors_...`,
  `test_every_file_a_process_reads_...`). Each such kind is listed below with its reason; an
  unlisted kind without a schema fails.
- On the API server: every rendered object of a kind it serves is applied with kubectl
  (server-side apply, as an operator would). What v1.20 does not serve, policy/v1
  PodDisruptionBudget, autoscaling/v2 HorizontalPodAutoscaler, monitoring.coreos.com and
  cert-manager.io, is refused by the server with its own 404 (`test_what_the_1_20_server_does_not_
  serve_...`); the manifests keep the current versions, validate offline, and the budgets and the
  HPA pass a dry run at the nearest version 1.20 serves.
- RBAC: kube-controller-manager (1.20, with the service-account key) writes a token Secret for each
  ServiceAccount; the tests read it as admin and call the API as that account: the real controller
  does its whole job with its token, and is refused Secrets and what lies outside its Role (whose
  `create` on deployments the server shows necessary); the api-server, worker, router and
  worker-pod accounts are refused everything but the self-reviews every authenticated user may do.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
import json
import logging
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from api.template_spec import TemplateSpec
from controller.deployments import worker_deployment
from controller.main import Controller, api_client
from controller.settings import ControllerSettings
from domain.pools import parse_worker_pool
from store import Store
from tests.kubernetes.cluster import REPO, Cluster

pytestmark = pytest.mark.kubernetes

DEPLOY = REPO / "deploy"
TARGETS = {
    "base": DEPLOY / "base",
    "local": DEPLOY / "overlays" / "local",
    "production": DEPLOY / "overlays" / "production",
}
NS = "ate-system"
SCHEMA_VERSIONS = ("1.32", kubernetes_validate.utils.major_minor(kubernetes_validate.utils.latest_version()))

# Kinds no schema bundled with kubernetes-validate covers (it has Kubernetes' own APIs only), and
# what checks them instead. Anything else without a schema fails the offline test.
PROMETHEUS_OPERATOR = "the Prometheus operator's CRD, whose schema is not on this machine: what it selects is checked"
CERT_MANAGER = "cert-manager's CRD, whose schema is not on this machine: what the processes mount from it is checked"
NO_BUNDLED_SCHEMA = {
    ("ate.dev/v1alpha1", "WorkerPool"): "ate's own CRD: the test API server checks it against the CRD's schema",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): PROMETHEUS_OPERATOR,
    ("monitoring.coreos.com/v1", "PodMonitor"): PROMETHEUS_OPERATOR,
    ("cert-manager.io/v1", "Issuer"): CERT_MANAGER,
    ("cert-manager.io/v1", "Certificate"): CERT_MANAGER,
}
MONITORS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PodMonitor")}
CERTIFICATES = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}
# Kinds the shipped manifests use that kube-apiserver v1.20.2 does not serve: (group, version,
# plural, the nearest version 1.20 serves or None).
HPA_V2 = ("autoscaling", "v2", "horizontalpodautoscalers", "autoscaling/v2beta2")
NOT_SERVED_BY_1_20 = {
    ("policy/v1", "PodDisruptionBudget"): ("policy", "v1", "poddisruptionbudgets", "policy/v1beta1"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"): HPA_V2,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ("monitoring.coreos.com", "v1", "servicemonitors", None),
    ("monitoring.coreos.com/v1", "PodMonitor"): ("monitoring.coreos.com", "v1", "podmonitors", None),
    ("cert-manager.io/v1", "Issuer"): ("cert-manager.io", "v1", "issuers", None),
    ("cert-manager.io/v1", "Certificate"): ("cert-manager.io", "v1", "certificates", None),
}
# What every authenticated user may do (the RBAC docs' default ClusterRole system:basic-user):
# the only resource rules an account without a Role of its own may show.
BASIC_USER = {("authorization.k8s.io", "selfsubjectaccessreviews"), ("authorization.k8s.io", "selfsubjectrulesreviews")}
NO_API_ACCOUNTS = ("ate-api-server", "ate-temporal-worker", "ate-router", "ate-worker")
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")


def kubectl() -> str:
    path = shutil.which("kubectl")
    assert path, "kubectl is needed to render deploy/ (kubectl kustomize)"
    return path


@functools.cache
def _render(target: str) -> str:
    done = subprocess.run([kubectl(), "kustomize", str(TARGETS[target])], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize {TARGETS[target]} failed:\n{done.stderr}"
    return done.stdout


def rendered(target: str) -> list[dict[str, Any]]:
    """The objects of one kustomization, as kubectl renders them (a fresh copy each call)."""
    return [doc for doc in yaml.safe_load_all(_render(target)) if doc]


def key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["apiVersion"], obj["kind"]


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objects if o["kind"] == "Deployment"}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions with In/NotIn/Exists/DoesNotExist) against labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        k, op, values = expression["key"], expression["operator"], expression.get("values", [])
        if (op == "Exists" and k not in labels) or (op == "DoesNotExist" and k in labels):
            return False
        if (op == "In" and labels.get(k) not in values) or (op == "NotIn" and labels.get(k) in values):
            return False
    return True


def until(check: Callable[[], Any], seconds: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {seconds:g} s: {what or check.__name__}")
        time.sleep(0.1)


def forbidden(call: Callable[[], Any]) -> str:
    """The API server's message of a 403 that `call` must get."""
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status == 403, refused.value.body
    return str(json.loads(refused.value.body)["message"])


# --- offline ------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_every_rendered_object_validates_against_the_kubernetes_schemas(target: str) -> None:
    without_schema: set[tuple[str, str]] = set()
    for obj in rendered(target):
        for version in SCHEMA_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                assert key(obj) in NO_BUNDLED_SCHEMA, f"{key(obj)}: no schema in {version}, no other check"
                without_schema.add(key(obj))
            except kubernetes_validate.ValidationError as error:
                where = ".".join(str(p) for p in error.path)
                pytest.fail(
                    f"{target}: {obj['kind']}/{obj['metadata']['name']} against {version}: {where}: {error.message}"
                )
    expected = {("ate.dev/v1alpha1", "WorkerPool")}
    if target != "base":
        expected |= CERTIFICATES
    if target == "production":
        expected |= MONITORS
    assert without_schema == expected


def test_the_offline_validator_refuses_what_the_schemas_forbid() -> None:
    """The check above is not vacuous: a misspelt field and a wrong type are refused."""
    deployment = named(rendered("base"), "Deployment", "ate-api-server")
    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/healthz"
    with pytest.raises(kubernetes_validate.ValidationError, match="Additional properties are not allowed"):
        kubernetes_validate.validate(typo, "1.32", strict=True)
    wrong = copy.deepcopy(deployment)
    wrong["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError, match="'two' is not of type 'integer'"):
        kubernetes_validate.validate(wrong, "1.32", strict=True)


def test_the_overlays_differ_where_they_should() -> None:
    for target in TARGETS:
        objects = rendered(target)
        assert all(
            o["metadata"].get("namespace") == NS
            for o in objects
            if o["kind"] not in ("Namespace", "CustomResourceDefinition")
        )
        controller = pod_specs(objects)["ate-controller"]["containers"][0]
        env = {e["name"]: e.get("value") for e in controller["env"]}
        assert env["ATE_CONTROLLER_IMAGE"] == controller["image"], f"{target}: worker pods would run another image"
        # the RBAC is the base's in every overlay (the server tests apply the production one)
        assert [o for o in objects if o["kind"] in RBAC_KINDS] == [
            o for o in rendered("base") if o["kind"] in RBAC_KINDS
        ]
        pdbs = {o["metadata"]["name"] for o in objects if key(o) == ("policy/v1", "PodDisruptionBudget")}
        assert {"ate-api-server", "ate-router"} <= pdbs
    local = rendered("local")
    assert {c["image"] for s in pod_specs(local).values() for c in s["containers"]} == {"ate:dev"}
    assert {o["metadata"]["name"]: o["spec"]["replicas"] for o in local if o["kind"] == "Deployment"} == dict.fromkeys(
        ("ate-api-server", "ate-temporal-worker", "ate-router", "ate-controller"), 1
    )
    production = rendered("production")
    replicas = {o["metadata"]["name"]: o["spec"]["replicas"] for o in production if o["kind"] == "Deployment"}
    assert replicas["ate-api-server"] >= 2 and replicas["ate-router"] >= 2 and replicas["ate-controller"] == 1
    for name, spec in pod_specs(production).items():
        for container in spec["containers"]:
            assert {"cpu", "memory"} <= set(container["resources"].get("limits", {})), f"{name}: no limits"
    assert {key(o) for o in production if key(o) in MONITORS} == MONITORS
    assert not [o for o in rendered("base") + local if key(o) in MONITORS]
    # cert-manager's objects in both overlays (ate needs them), not in the base (it applies without)
    assert {key(o) for o in production if key(o) in CERTIFICATES} == CERTIFICATES
    assert {key(o) for o in local if key(o) in CERTIFICATES} == CERTIFICATES
    assert not [o for o in rendered("base") if key(o) in CERTIFICATES]


def test_the_control_plane_pods_meet_the_restricted_pod_security_standard() -> None:
    """The "restricted" profile of https://kubernetes.io/docs/concepts/security/pod-security-standards/
    (the namespace enforces only "privileged", for the worker pods), plus a read-only root."""
    allowed_volumes = {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
    for target in TARGETS:
        for name, spec in pod_specs(rendered(target)).items():
            assert not any(spec.get(f) for f in ("hostNetwork", "hostPID", "hostIPC")), name
            for volume in spec.get("volumes", []):
                assert set(volume) - {"name"} <= allowed_volumes, f"{name}: volume {volume}"
            pod_context = spec.get("securityContext", {})
            for container in spec["containers"] + spec.get("initContainers", []):
                context = {**pod_context, **container.get("securityContext", {})}
                assert context.get("runAsNonRoot") is True and context.get("runAsUser", 1) != 0, name
                assert context.get("allowPrivilegeEscalation") is False and not context.get("privileged"), name
                assert context.get("capabilities", {}).get("drop") == ["ALL"] and not context["capabilities"].get(
                    "add"
                ), name
                assert context.get("seccompProfile", {}).get("type") in ("RuntimeDefault", "Localhost"), name
                assert context.get("readOnlyRootFilesystem") is True, name
                assert "ports" not in container or all("hostPort" not in p for p in container["ports"]), name


def test_each_component_is_wired_to_its_settings_and_probes() -> None:
    objects = rendered("production")
    specs = pod_specs(objects)
    accounts = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ServiceAccount"}
    args = {name: spec["containers"][0]["args"] for name, spec in specs.items()}
    assert args == {
        "ate-api-server": ["api-server"],
        "ate-temporal-worker": ["worker"],
        "ate-router": ["router"],
        "ate-controller": ["controller"],
    }
    for name, spec in specs.items():
        [container] = spec["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["ATE_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "ate-database", "key": "url"}, name
        if name in ("ate-api-server", "ate-temporal-worker"):
            assert env["ATE_TEMPORAL_ADDRESS"]["valueFrom"]["secretKeyRef"] == {
                "name": "ate-temporal",
                "key": "address",
            }
        assert spec["serviceAccountName"] == name
        mounts_token = name == "ate-controller"
        assert spec["automountServiceAccountToken"] is mounts_token
        assert accounts[name].get("automountServiceAccountToken", True) is mounts_token
        # probes name ports the container opens, and the process listens there on every address
        # (each process's default is 127.0.0.1, which a probe or a Service cannot reach)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        for probe in ("readinessProbe", "livenessProbe"):
            action = container[probe].get("httpGet") or container[probe]["tcpSocket"]
            assert action["port"] in ports, f"{name}: {probe}"
        values = {e["name"]: e.get("value") for e in container["env"]}
        for port in ports.values():
            api_style = values.get("ATE_HOST") == "0.0.0.0" and values.get("ATE_PORT") == str(port)
            assert api_style or f"0.0.0.0:{port}" in values.values(), f"{name}: nothing listens on {port}"
    assert accounts["ate-worker"]["automountServiceAccountToken"] is False
    # the router proxies with nginx in production, and the image has nginx's Lua module for it
    router_env = {e["name"]: e.get("value") for e in specs["ate-router"]["containers"][0]["env"]}
    assert router_env["ATE_ROUTER_DATA_PATH"] == "nginx"
    assert "libnginx-mod-http-lua" in (REPO / "Containerfile").read_text()
    api = specs["ate-api-server"]["containers"][0]
    assert api["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert {e["name"]: e.get("value") for e in api["env"]}["ATE_PORT"] == "8080"
    # the controller's defaults name the Service ate-api-server:8080 in ate-system
    service = named(objects, "Service", "ate-api-server")
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(8080, "http")]
    assert ControllerSettings().api_server == "http://ate-api-server.ate-system.svc:8080"


def config_map(objects: list[dict[str, Any]]) -> dict[str, str]:
    [found] = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("ate-config-")]
    return dict(found["data"])


def test_every_file_a_process_reads_is_mounted_from_the_secret_that_holds_it() -> None:
    """Tokens and certificates reach the processes as files (ATE_*_TOKEN_FILE, ATE_NODE_CA_FILE,
    ATE_ATELET_CLIENT_TLS_*): each path lies in a read-only mount of a Secret volume that carries
    that key. The certificates' Secret is the one cert-manager writes for the control plane, from the
    same CA issuer the controller names for the worker pods' node certificates."""
    for target in ("local", "production"):
        objects = rendered(target)
        read: dict[str, set[str]] = {}
        for name, spec in pod_specs(objects).items():
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            [container] = spec["containers"]
            for env in container["env"]:
                path = env.get("value") or ""
                if not path.startswith("/var/run/ate/"):
                    continue
                [mount] = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
                assert mount.get("readOnly") is True, f"{name}: {env['name']}"
                secret = volumes[mount["name"]]["secret"]
                file = path[len(mount["mountPath"]) + 1 :]
                items = secret.get("items")
                read.setdefault(secret["secretName"], set()).add(
                    next(i["key"] for i in items if i["path"] == file) if items else file
                )
        assert read == {
            "ate-bootstrap-token": {"token"},
            "ate-secret-keys": {"keys"},  # the api-server's key ring (docs/security.md, "Secrets")
            "ate-router-token": {"token"},
            "ate-controller-token": {"token"},
            "ate-control-plane-tls": {"tls.crt", "tls.key", "ca.crt"},  # what cert-manager writes
        }, target
        certificates = [o for o in objects if o["kind"] == "Certificate"]
        issuers = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "Issuer"}
        [control_plane] = [c["spec"] for c in certificates if c["spec"]["secretName"] == "ate-control-plane-tls"]
        assert control_plane["commonName"] == "ate-control-plane" and "client auth" in control_plane["usages"]
        config = config_map(objects)
        assert config["ATE_CONTROLLER_WORKER_TLS_ISSUER_KIND"] == "Issuer"
        issuer = config["ATE_CONTROLLER_WORKER_TLS_ISSUER"]
        assert control_plane["issuerRef"] == {"name": issuer, "kind": "Issuer", "group": "cert-manager.io"}
        [ca] = [c["spec"] for c in certificates if c["spec"]["secretName"] == issuers[issuer]["ca"]["secretName"]]
        assert ca["isCA"] is True and "selfSigned" in issuers[ca["issuerRef"]["name"]]
    claims = [o["metadata"]["name"] for o in rendered("local") if o["kind"] == "PersistentVolumeClaim"]
    assert claims == [config_map(rendered("local"))["ATE_CONTROLLER_IMAGES_CLAIM"]]


def test_no_selector_of_deploy_catches_the_worker_pods() -> None:
    """The worker pods the controller makes carry app.kubernetes.io/name=ate-worker: deploy/'s
    Services, budgets and Deployments must select only their own pods."""
    objects = rendered("production")
    pool = parse_worker_pool(named(objects, "WorkerPool", "general"))
    worker_pod_labels = worker_deployment(
        pool, "uid", image="ate", api_server="http://a", service_account="ate-worker"
    )["spec"]["template"]["metadata"]["labels"]
    for obj in objects:
        selector = None
        if obj["kind"] == "Service":
            selector = {"matchLabels": obj["spec"]["selector"]}
        elif obj["kind"] in ("Deployment", "PodDisruptionBudget"):
            selector = obj["spec"]["selector"]
        if selector is None:
            continue
        assert not selects(selector, worker_pod_labels), f"{obj['kind']}/{obj['metadata']['name']} selects worker pods"
        targets = [n for n, o in ((o["metadata"]["name"], o) for o in objects if o["kind"] == "Deployment")
                   if selects(selector, o["spec"]["template"]["metadata"]["labels"])]  # fmt: skip
        assert len(targets) == 1, f"{obj['kind']}/{obj['metadata']['name']} selects {targets}"


def test_the_monitors_point_at_services_and_ports_that_exist() -> None:
    """What can be checked of the ServiceMonitors and the PodMonitor without their schema: each
    selects Services (or the worker pods) that have the port it scrapes, and the controller, whose
    metric the HPA needs, is among them."""
    objects = rendered("production")
    services = [o for o in objects if o["kind"] == "Service"]
    scraped: set[str] = set()
    for monitor in (o for o in objects if o["kind"] == "ServiceMonitor"):
        chosen = [s for s in services if selects(monitor["spec"]["selector"], s["metadata"]["labels"])]
        assert chosen, monitor["metadata"]["name"]
        for service in chosen:
            names = {p["name"] for p in service["spec"]["ports"]}
            assert all(e["port"] in names for e in monitor["spec"]["endpoints"]), service["metadata"]["name"]
            scraped.add(service["metadata"]["name"])
    assert {"ate-api-server", "ate-router", "ate-temporal-worker-metrics", "ate-controller-metrics"} <= scraped
    pool = parse_worker_pool(named(objects, "WorkerPool", "general"))
    worker_pods = worker_deployment(pool, "uid", image="ate", api_server="http://a", service_account="ate-worker")
    template = worker_pods["spec"]["template"]
    [podmonitor] = [o for o in objects if o["kind"] == "PodMonitor"]
    assert selects(podmonitor["spec"]["selector"], template["metadata"]["labels"])
    ports = {p["name"] for c in template["spec"]["containers"] for p in c["ports"]}
    assert all(e["port"] in ports for e in podmonitor["spec"]["podMetricsEndpoints"])


def test_the_hpa_scales_the_example_pool_on_its_assigned_workers() -> None:
    for target in TARGETS:
        objects = rendered(target)
        [hpa] = [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]
        pool = named(objects, "WorkerPool", hpa["spec"]["scaleTargetRef"]["name"])
        assert hpa["spec"]["scaleTargetRef"] == {
            "apiVersion": pool["apiVersion"],
            "kind": "WorkerPool",
            "name": "general",
        }
        [metric] = hpa["spec"]["metrics"]
        assert metric["type"] == "External"
        assert metric["external"]["metric"] == {
            "name": "ate_workerpool_workers",
            "selector": {"matchLabels": {"pool": "general", "state": "assigned"}},
        }
        assert hpa["spec"]["minReplicas"] >= 1  # 0 needs the HPAScaleToZero feature gate
        assert hpa["spec"]["minReplicas"] <= pool["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]


def test_the_counter_template_is_the_counter_example_and_the_api_accepts_it() -> None:
    """deploy/base/counter-template.yaml is an ate API object (ate create template), not a
    Kubernetes one: kustomize leaves it out; it is the example's template, selecting the pool."""
    shipped = yaml.safe_load((DEPLOY / "base" / "counter-template.yaml").read_text())
    example = yaml.safe_load((REPO / "examples" / "counter" / "template.yaml").read_text())
    assert {k: v for k, v in shipped["spec"].items() if k != "workerSelector"} == example["spec"]
    assert (
        shipped["spec"]["workerSelector"].items()
        <= named(rendered("base"), "WorkerPool", "general")["metadata"]["labels"].items()
    )
    TemplateSpec.model_validate(shipped["spec"])
    assert not [o for o in rendered("base") if o["kind"] == "ActorTemplate"]
    kustomization = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    assert "counter-template.yaml" not in kustomization["resources"]


# --- on the API server --------------------------------------------------------------------------


@dataclass
class Deployed:
    objects: list[dict[str, Any]]
    tokens: dict[str, str]
    apply_output: str


def service_account_token(core: client.CoreV1Api, account: str) -> str:
    """The token kube-controller-manager's token controller wrote for `account` (read as admin)."""

    def token() -> str | None:
        for secret in core.list_namespaced_secret(NS, field_selector="type=kubernetes.io/service-account-token").items:
            if (secret.metadata.annotations or {}).get("kubernetes.io/service-account.name") == account:
                data = secret.data or {}
                if data.get("token"):
                    return base64.b64decode(data["token"]).decode()
        return None

    return str(until(token, 60, f"token Secret of {account}"))


def apply(cluster: Cluster, objects: list[dict[str, Any]]) -> str:
    """`kubectl apply --server-side` as admin, as an operator installs deploy/."""
    done = subprocess.run(
        [kubectl(), f"--kubeconfig={cluster.kubeconfig}", "apply", "--server-side", "--field-manager=ate-deploy-test",
         "-f", "-"],
        input=yaml.safe_dump_all(objects), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"kubectl apply failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def admin(cluster: Cluster) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


def as_account(cluster: Cluster, deployed: Deployed, account: str) -> client.ApiClient:
    configuration = client.Configuration()
    path = cluster.kubeconfig_for(deployed.tokens[account], account)
    config.load_kube_config(config_file=str(path), client_configuration=configuration)
    return client.ApiClient(configuration)


def raw(kube: client.ApiClient, method: str, path: str, body: Any = None, dry_run: bool = False) -> tuple[int, Any]:
    """One request as `kube`'s user: (status, the JSON answer, or its text when it is not JSON)."""
    query = [("dryRun", "All")] if dry_run else None
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    method, url, headers, serialized, _ = kube.param_serialize(
        method, path, query_params=query, header_params=headers, body=body, auth_settings=["BearerToken"]
    )
    response = kube.call_api(method, url, header_params=headers, body=serialized)
    response.read()
    text = response.data.decode()
    try:
        return response.status, json.loads(text)
    except json.JSONDecodeError:
        return response.status, text.strip()


@pytest.fixture(scope="module")
def deployed(cluster: Cluster) -> Iterator[Deployed]:
    """The production overlay's objects that v1.20 serves, applied; every account's token."""
    objects = rendered("production")
    output = apply(cluster, [o for o in objects if key(o) not in NOT_SERVED_BY_1_20])
    kube = admin(cluster)
    core = client.CoreV1Api(kube)
    accounts = [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"]
    try:
        yield Deployed(objects, {a: service_account_token(core, a) for a in accounts}, output)
    finally:
        core.delete_namespace(NS)

        def gone() -> bool:
            try:
                core.read_namespace(NS)
            except ApiException as error:
                return error.status == 404
            return False

        until(gone, 60, f"namespace {NS} deleted")  # its clean-up must not overlap the next module's tests


def test_the_rendered_objects_apply_and_the_worker_pool_passes_its_crd(cluster: Cluster, deployed: Deployed) -> None:
    applied = {
        line.split(" ")[0] for line in deployed.apply_output.splitlines() if line.endswith(" serverside-applied")
    }
    expected = {
        f"{o['kind'].lower()}{'.' + o['apiVersion'].split('/')[0] if '/' in o['apiVersion'] else ''}/{o['metadata']['name']}"
        for o in deployed.objects
        if key(o) not in NOT_SERVED_BY_1_20
    }
    assert applied == expected
    # the CRD is the file the session started with (conftest.py): re-applying it changes nothing
    # the other modules' tests run against
    [crd] = [o for o in deployed.objects if o["kind"] == "CustomResourceDefinition"]
    assert crd == yaml.safe_load((DEPLOY / "base" / "workerpool-crd.yaml").read_text())
    kube = admin(cluster)
    # the WorkerPool was checked against the CRD's schema, and nothing of it was pruned as unknown
    shipped = named(deployed.objects, "WorkerPool", "general")
    stored = client.CustomObjectsApi(kube).get_namespaced_custom_object(
        "ate.dev", "v1alpha1", NS, "workerpools", "general"
    )
    assert stored["spec"] == shipped["spec"] and stored["metadata"]["labels"] == shipped["metadata"]["labels"]
    # ... and the API server refuses a broken copy with its own message
    broken = copy.deepcopy(shipped)
    broken["metadata"]["name"] = "broken"
    broken["spec"]["capacity"]["places"] = 0
    with pytest.raises(ApiException) as refused:
        client.CustomObjectsApi(kube).create_namespaced_custom_object("ate.dev", "v1alpha1", NS, "workerpools", broken)
    assert refused.value.status == 422
    assert (
        "spec.capacity.places in body should be greater than or equal to 1" in json.loads(refused.value.body)["message"]
    )
    broken["spec"]["capacity"]["places"] = 2  # a worker pod hosts one actor: the CRD says so too
    with pytest.raises(ApiException) as refused:
        client.CustomObjectsApi(kube).create_namespaced_custom_object("ate.dev", "v1alpha1", NS, "workerpools", broken)
    assert refused.value.status == 422
    assert "spec.capacity.places in body should be less than or equal to 1" in json.loads(refused.value.body)["message"]
    # the scale subresource the HPA drives answers with the pool's replicas
    scale = client.CustomObjectsApi(kube).get_namespaced_custom_object_scale(
        "ate.dev", "v1alpha1", NS, "workerpools", "general"
    )
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == shipped["spec"]["replicas"]


def test_what_the_1_20_server_does_not_serve_it_refuses_and_the_manifests_keep_current_versions(
    cluster: Cluster, deployed: Deployed
) -> None:
    """kube-apiserver v1.20.2 serves neither policy/v1 (PodDisruptionBudget is policy/v1beta1
    there) nor autoscaling/v2 (autoscaling/v2beta2 there), and no monitoring.coreos.com without the
    Prometheus operator. The manifests target current Kubernetes and are not downgraded: the
    server's own refusal is asserted, the objects validate offline, and a dry run at the nearest
    version 1.20 serves checks the fields both versions share."""
    kube = admin(cluster)
    seen = set()
    for obj in (o for o in deployed.objects if key(o) in NOT_SERVED_BY_1_20):
        group, version, plural, nearest = NOT_SERVED_BY_1_20[key(obj)]
        seen.add(key(obj))
        status, discovery = raw(kube, "GET", f"/apis/{group}")
        if nearest is None:  # the whole group is unknown to it
            assert (status, discovery) == (404, "404 page not found")
        else:
            served = {v["groupVersion"] for v in discovery["versions"]}
            assert status == 200 and f"{group}/{version}" not in served and nearest in served, served
        status, answer = raw(kube, "POST", f"/apis/{group}/{version}/namespaces/{NS}/{plural}", obj)
        assert status == 404
        if nearest is None:
            assert answer == "404 page not found"
            continue
        assert (answer["reason"], answer["message"]) == ("NotFound", "the server could not find the requested resource")
        assert kubernetes_validate.validate(obj, "1.32", strict=True) == "1.32"
        older = {**copy.deepcopy(obj), "apiVersion": nearest}
        status, answer = raw(kube, "POST", f"/apis/{nearest}/namespaces/{NS}/{plural}", older, dry_run=True)
        assert status == 201, answer
    assert seen == set(NOT_SERVED_BY_1_20)


def test_the_hpa_controller_may_scale_the_pool_and_reads_external_metrics_only_through_the_adapter(
    cluster: Cluster, deployed: Deployed
) -> None:
    """The HPA runs as kube-system/horizontal-pod-autoscaler (kube-controller-manager with
    --use-service-account-credentials). Its bootstrap ClusterRole may get and update any */scale,
    so WorkerPools too; on v1.20 it does not include external.metrics.k8s.io: the metrics adapter's
    install grants it (prometheus-adapter's hpa-controller-external-metrics binding), as
    base/hpa.yaml and docs/kubernetes.md say."""
    authorization = client.AuthorizationV1Api(admin(cluster))
    hpa = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"

    def allowed(**attributes: str) -> bool:
        review = authorization.create_subject_access_review(
            {"spec": {"user": hpa, "resourceAttributes": {"namespace": NS, **attributes}}}
        )
        return bool(review.status.allowed)

    assert allowed(group="ate.dev", resource="workerpools", subresource="scale", verb="get", name="general")
    assert allowed(group="ate.dev", resource="workerpools", subresource="scale", verb="update", name="general")
    assert not allowed(group="external.metrics.k8s.io", resource="ate_workerpool_workers", verb="list")


async def test_the_controller_account_does_the_controllers_whole_job(
    cluster: Cluster, deployed: Deployed, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The real controller, with only its own token: it lists and watches WorkerPools, their
    Deployments and the worker pods, creates the pool's Deployment by server-side apply, writes the
    pool's status and turns a worker pod into a worker record; nothing it asks is refused."""
    caplog.set_level(logging.WARNING)
    kubeconfig = cluster.kubeconfig_for(deployed.tokens["ate-controller"], "ate-controller")
    settings = ControllerSettings(
        namespace=NS, kubeconfig=str(kubeconfig), image="ate:test", metrics_listen="", resync_seconds=1,
    )  # fmt: skip
    kube = admin(cluster)
    apps, core, custom = client.AppsV1Api(kube), client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    controller = Controller(settings, api_client(settings), store)
    task = asyncio.create_task(controller.run())
    try:

        async def eventually(check: Callable[[], Any], what: str) -> Any:
            deadline = time.monotonic() + 30
            while not (value := await asyncio.to_thread(check)):
                assert time.monotonic() < deadline and not task.done(), what
                await asyncio.sleep(0.2)
            return value

        def deployment() -> client.V1Deployment | None:
            try:
                return apps.read_namespaced_deployment("ate-workers-general", NS)
            except ApiException as error:
                assert error.status == 404
                return None

        made = await eventually(deployment, "the pool's Deployment")
        assert any(m.manager == "ate-controller" and m.operation == "Apply" for m in made.metadata.managed_fields)
        await eventually(
            lambda: (
                custom.get_namespaced_custom_object("ate.dev", "v1alpha1", NS, "workerpools", "general").get("status")
                or {}
            ).get("conditions"),
            "the pool's status",
        )
        pods = await eventually(
            lambda: core.list_namespaced_pod(NS, label_selector="ate.dev/pool=general").items, "worker pods"
        )
        name = pods[0].metadata.name
        core.patch_namespaced_pod_status(
            name, NS, {"status": {"podIP": "10.9.8.7", "conditions": [{"type": "Ready", "status": "True"}]}}
        )

        async def worker() -> Any:
            return next((w for w in await store.nodes.list_workers() if w.node == name and w.state == "ACTIVE"), None)

        deadline = time.monotonic() + 30
        while (found := await worker()) is None:
            assert time.monotonic() < deadline and not task.done(), "the worker pod's worker record"
            await asyncio.sleep(0.2)
        assert (found.pool, found.ip) == ("general", "10.9.8.7")
        await asyncio.sleep(2.5)  # a resync or two: each gets every pool again and re-applies
        assert all(w.relists >= 1 for w in controller.watchers)
        # a refused call is logged (and retried), never raised; counted before the stop, which
        # ends the watches in flight (and may log that)
        complaints = [r.getMessage() for r in caplog.records if r.name.startswith(("controller", "ate.controller"))]
        assert not complaints, complaints
    finally:
        controller.stop()
        await asyncio.wait_for(task, 30)


def test_the_controller_account_is_refused_secrets_and_what_lies_outside_its_role(
    cluster: Cluster, deployed: Deployed
) -> None:
    api = as_account(cluster, deployed, "ate-controller")
    core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
    user = 'User "system:serviceaccount:ate-system:ate-controller"'
    secret = next(
        s.metadata.name
        for s in client.CoreV1Api(admin(cluster)).list_namespaced_secret(NS).items
        if s.metadata.name.startswith("ate-api-server-token-")
    )
    assert forbidden(lambda: core.read_namespaced_secret(secret, NS)) == (
        f'secrets "{secret}" is forbidden: {user} cannot get resource "secrets" in API group "" in the namespace "ate-system"'
    )
    assert f'{user} cannot list resource "secrets"' in forbidden(lambda: core.list_namespaced_secret(NS))
    assert f'{user} cannot list resource "pods" in API group "" in the namespace "default"' in forbidden(
        lambda: core.list_namespaced_pod("default")
    )
    assert f'{user} cannot list resource "workerpools" in API group "ate.dev" at the cluster scope' in forbidden(
        lambda: custom.list_cluster_custom_object("ate.dev", "v1alpha1", "workerpools")
    )
    assert f'{user} cannot create resource "pods"' in forbidden(
        lambda: core.create_namespaced_pod(
            NS, {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        )
    )
    assert f'{user} cannot delete resource "deployments"' in forbidden(
        lambda: apps.delete_namespaced_deployment("ate-api-server", NS)
    )
    # status yes (its job), the spec no: replicas belong to the user and the HPA
    assert f'{user} cannot patch resource "workerpools" in API group "ate.dev"' in forbidden(
        lambda: custom.patch_namespaced_custom_object(
            "ate.dev", "v1alpha1", NS, "workerpools", "general", {"spec": {"replicas": 5}}
        )
    )
    assert f'{user} cannot patch resource "workerpools/scale"' in forbidden(
        lambda: custom.patch_namespaced_custom_object_scale(
            "ate.dev", "v1alpha1", NS, "workerpools", "general", {"spec": {"replicas": 5}}
        )
    )


def test_server_side_apply_that_creates_a_deployment_needs_create_not_only_patch(
    cluster: Cluster, deployed: Deployed
) -> None:
    """Why the controller's Role has `create` on deployments although it only ever PATCHes: the
    API server authorizes an apply that creates the object as create too. The same Role without
    create: applying a new Deployment is refused, applying an existing one is allowed."""
    kube = admin(cluster)
    core, rbac = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube)
    role = named(deployed.objects, "Role", "ate-controller")
    rules = [{**r, "verbs": [v for v in r["verbs"] if v != "create"]} for r in role["rules"]]
    assert rules != role["rules"]
    core.create_namespaced_service_account(NS, {"metadata": {"name": "no-create"}})
    rbac.create_namespaced_role(NS, {"metadata": {"name": "no-create"}, "rules": rules})
    rbac.create_namespaced_role_binding(NS, {
        "metadata": {"name": "no-create"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "no-create"},
        "subjects": [{"kind": "ServiceAccount", "name": "no-create", "namespace": NS}],
    })  # fmt: skip
    path = cluster.kubeconfig_for(service_account_token(core, "no-create"), "no-create")
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration)
    apps = client.AppsV1Api(client.ApiClient(configuration))
    body = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ssa-probe", "namespace": NS},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"probe": "ssa"}},
                 "template": {"metadata": {"labels": {"probe": "ssa"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}},
    }  # fmt: skip

    def ssa() -> Any:
        return apps.patch_namespaced_deployment(
            "ssa-probe", NS, body, field_manager="probe", force=True, _content_type="application/apply-patch+yaml"
        )

    assert forbidden(ssa).startswith('deployments.apps "ssa-probe" is forbidden')
    client.AppsV1Api(kube).create_namespaced_deployment(NS, body)
    assert ssa().metadata.name == "ssa-probe"


@pytest.mark.parametrize("account", NO_API_ACCOUNTS)
def test_the_accounts_without_api_access_are_refused_and_hold_no_rules(
    cluster: Cluster, deployed: Deployed, account: str
) -> None:
    api = as_account(cluster, deployed, account)
    message = forbidden(lambda: client.CoreV1Api(api).list_namespaced_pod(NS))
    assert message == (
        f'pods is forbidden: User "system:serviceaccount:ate-system:{account}" cannot list resource "pods" '
        'in API group "" in the namespace "ate-system"'
    )
    review = client.AuthorizationV1Api(api).create_self_subject_rules_review({"spec": {"namespace": NS}})
    held = {
        (group, resource)
        for rule in review.status.resource_rules
        for group in rule.api_groups
        for resource in rule.resources
    }
    assert held == BASIC_USER
    assert all(rule.verbs == ["create"] for rule in review.status.resource_rules)
    stored = client.CoreV1Api(admin(cluster)).read_namespaced_service_account(account, NS)
    assert stored.automount_service_account_token is False


def test_the_rendered_pods_use_their_accounts_on_the_server(cluster: Cluster, deployed: Deployed) -> None:
    """What the server stored of the Deployments: each pod template runs as its own account and
    only the controller's mounts a token."""
    apps = client.AppsV1Api(admin(cluster))
    for name in ("ate-api-server", "ate-temporal-worker", "ate-router", "ate-controller"):
        spec = apps.read_namespaced_deployment(name, NS).spec.template.spec
        assert spec.service_account_name == name
        assert spec.automount_service_account_token is (name == "ate-controller")
