"""Tests of the Helm chart in charts/karpenter.

The chart is linted and rendered by the real Helm engine: helm-python-sdk binds Helm's Go SDK
(bundled in the wheel as a native library), so no helm binary, cluster or network is needed.
Rendering is `helm template`: offline, `lookup` returns nothing, CRDs are not rendered (Helm
installs crds/ itself, and only on first install).

Run: hack/test.sh (the whole suite), or python -m pytest -q tests/chart in a venv with
tests/chart/requirements.txt.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import helm_python as helm
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "karpenter"
UPSTREAM_VALUES = Path(__file__).resolve().parent / "upstream-values.yaml"

RELEASE = "karpenter"
NAMESPACE = "kube-system"
CLUSTER = {"settings": {"clusterName": "test-cluster"}}
MISSING_CLUSTER_NAME = (
    "settings.clusterName is required: set it to your EKS cluster name "
    "(--set settings.clusterName=my-cluster)"
)
NAMESPACED = {
    "Deployment",
    "Service",
    "ServiceAccount",
    "PodDisruptionBudget",
    "Role",
    "RoleBinding",
    "ServiceMonitor",
}
SELECTOR = {"app.kubernetes.io/name": "karpenter", "app.kubernetes.io/instance": RELEASE}

# The chart's RBAC, rule by rule, in order: what the controllers call, verb by verb (upstream's
# tables in the reference, §6.2, minus the kinds and verbs nothing here uses; core events become
# events.k8s.io ones, which kube-runtime's recorder writes). test_install.py runs the controller
# as this ServiceAccount against a real API server, so a missing rule fails there.
CORE_RULES = [
    {"apiGroups": ["karpenter.sh"], "resources": ["nodepools", "nodeclaims", "nodeoverlays"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods", "nodes", "persistentvolumes", "persistentvolumeclaims"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses", "csinodes", "volumeattachments"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims", "nodeclaims/status"], "verbs": ["create", "delete", "patch"]},
    {"apiGroups": ["karpenter.sh"], "resources": ["nodepools", "nodepools/status"], "verbs": ["patch"]},
    {"apiGroups": ["karpenter.sh"], "resources": ["nodeoverlays/status"], "verbs": ["patch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch", "delete"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
]  # fmt: skip
AWS_RULES = [
    {"apiGroups": ["karpenter.k8s.aws"], "resources": ["ec2nodeclasses"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["karpenter.k8s.aws"], "resources": ["ec2nodeclasses", "ec2nodeclasses/status"], "verbs": ["patch"]},
]  # fmt: skip
ADMIN_VERBS = ["get", "list", "watch", "create", "delete", "patch"]
ADMIN_RULES = [
    {"apiGroups": ["karpenter.sh"], "resources": ["nodepools", "nodepools/status", "nodeclaims", "nodeclaims/status"], "verbs": ADMIN_VERBS},
    {"apiGroups": ["karpenter.k8s.aws"], "resources": ["ec2nodeclasses"], "verbs": ADMIN_VERBS},
]  # fmt: skip
LEADER_ELECTION_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["karpenter-leader-election"], "verbs": ["get", "update"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
]  # fmt: skip

# The Deployment's env with default values, in order (settings that are "" are left out).
DEFAULT_ENV = [
    ("KUBERNETES_MIN_VERSION", "1.19.0-0"),
    ("KARPENTER_SERVICE", "karpenter"),
    ("LOG_LEVEL", "info"),
    ("LOG_OUTPUT_PATHS", "stdout"),
    ("LOG_ERROR_OUTPUT_PATHS", "stderr"),
    ("METRICS_PORT", "8080"),
    ("HEALTH_PROBE_PORT", "8081"),
    ("SYSTEM_NAMESPACE", {"fieldRef": {"fieldPath": "metadata.namespace"}}),
    ("POD_NAME", {"fieldRef": {"fieldPath": "metadata.name"}}),
    ("CPU_REQUESTS", {"resourceFieldRef": {"containerName": "controller", "resource": "requests.cpu", "divisor": "1m"}}),
    ("MEMORY_LIMIT", {"resourceFieldRef": {"containerName": "controller", "resource": "limits.memory", "divisor": "1"}}),
    ("FEATURE_GATES", "ReservedCapacity=true,SpotToSpotConsolidation=false,NodeRepair=false,NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false"),
    ("AWS_FEATURE_GATES", "NodeClassCEL=false"),
    ("CLUSTER_NAME", "test-cluster"),
    ("ISOLATED_VPC", "false"),
    ("EKS_CONTROL_PLANE", "false"),
    ("VM_MEMORY_OVERHEAD_PERCENT", "0.075"),
    ("RESERVED_ENIS", "0"),
    ("ENABLE_ZONAL_SHIFT", "false"),
    ("BATCH_MAX_DURATION", "10s"),
    ("BATCH_IDLE_DURATION", "1s"),
    ("PREFERENCE_POLICY", "Respect"),
    ("MIN_VALUES_POLICY", "Strict"),
    ("IGNORE_DRA_REQUESTS", "true"),
    ("DISABLE_CLUSTER_STATE_OBSERVABILITY", "false"),
    ("DISABLE_DRY_RUN", "false"),
    ("AMI_REFRESH_INTERVAL", "1m"),
    ("SUBNET_REFRESH_INTERVAL", "1m"),
    ("CONSOLIDATION_REPLACEMENTS", "1"),
]  # fmt: skip


def merged(*layers: dict) -> dict:
    """Deep-merge value layers, later ones winning (what several -f / --set flags do)."""
    out: dict = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = value
    return out


def upstream_values() -> dict:
    """tests/chart/upstream-values.yaml, parsed by Helm's own values parser (as `-f` does)."""
    return helm.values_from_yaml(UPSTREAM_VALUES.read_text())


@pytest.fixture(scope="session")
def chart():
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart, values: dict | None, *, name: str = RELEASE, namespace: str = NAMESPACE) -> list[dict]:
    """`helm template`: every rendered manifest, parsed, in template-path order."""
    manifests = chart.render(values, name=name, namespace=namespace)
    docs = []
    for path in sorted(manifests):
        if not path.endswith(".yaml"):
            continue  # NOTES.txt
        docs.extend(doc for doc in yaml.safe_load_all(manifests[path]) if doc is not None)
    return docs


def only(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def container(docs: list[dict]) -> dict:
    return only(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def env_of(docs: list[dict]) -> list[tuple[str, object]]:
    return [(e["name"], e["value"] if "value" in e else e["valueFrom"]) for e in container(docs)["env"]]


@pytest.fixture(scope="session")
def default_docs(chart):
    return render(chart, CLUSTER)


@pytest.fixture(scope="session")
def upstream_docs(chart):
    return render(chart, upstream_values())


# --- the engine and the chart ---------------------------------------------------------------


def test_helm_engine_is_helm_v4():
    assert helm.__version__ == "0.2.2"
    assert helm.helm_sdk_version().startswith("v4."), helm.helm_sdk_version()


def test_chart_metadata(chart):
    meta = chart.metadata
    assert meta["name"] == "karpenter"
    assert meta["version"] == "0.1.0"
    assert meta["appVersion"] == "0.1.0"
    assert meta["kubeVersion"] == ">=1.20.0-0"
    assert meta["apiVersion"] == "v2"


def test_chart_ships_the_projects_crds(chart):
    names = sorted(Path(crd["filename"]).name for crd in chart.crds)
    assert names == sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    for crd in chart.crds:
        source = ROOT / "crds" / Path(crd["filename"]).name
        assert crd["data"] == source.read_text(), f"{crd['filename']}: cp crds/*.yaml charts/karpenter/crds/"


# --- lint -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kube_version", [None, "v1.20.0"])
@pytest.mark.parametrize("values", ["defaults", "upstream"])
def test_helm_lint_is_clean(values, kube_version):
    given = CLUSTER if values == "defaults" else upstream_values()
    report = helm.lint(CHART, given, strict=True, kube_version=kube_version)
    assert report["total_charts_linted"] == 1
    assert report["errors"] == []
    # severity 1 is INFO (only "icon is recommended"); 2 WARNING and 3 ERROR must not occur.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_helm_lint_catches_a_broken_template(tmp_path):
    """Lint really renders and parses: a copy with a broken template fails it."""
    broken = tmp_path / "karpenter"
    shutil.copytree(CHART, broken)
    (broken / "templates" / "broken.yaml").write_text("kind: ConfigMap\nmetadata: [\n")
    report = helm.lint(broken, CLUSTER, strict=True)
    assert report["errors"], report


# --- rendering: shape -----------------------------------------------------------------------


@pytest.mark.parametrize("docs_fixture", ["default_docs", "upstream_docs"])
def test_every_document_is_a_named_object(docs_fixture, request):
    docs = request.getfixturevalue(docs_fixture)
    assert docs
    for doc in docs:
        assert doc.get("apiVersion"), doc
        assert doc.get("kind"), doc
        assert doc.get("metadata", {}).get("name"), doc
        labels = doc["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", doc["metadata"]
        if doc["kind"] in NAMESPACED:
            assert doc["metadata"].get("namespace"), f"{doc['kind']}/{doc['metadata']['name']} has no namespace"


def test_default_objects(default_docs):
    got = sorted((d["apiVersion"], d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in default_docs)
    assert got == sorted([
        ("apps/v1", "Deployment", NAMESPACE, "karpenter"),
        ("v1", "Service", NAMESPACE, "karpenter"),
        ("v1", "ServiceAccount", NAMESPACE, "karpenter"),
        ("policy/v1", "PodDisruptionBudget", NAMESPACE, "karpenter"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", "", "karpenter-core"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", "karpenter-core"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", "", "karpenter"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", "karpenter"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", "", "karpenter-admin"),
        ("rbac.authorization.k8s.io/v1", "Role", NAMESPACE, "karpenter"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding", NAMESPACE, "karpenter"),
    ])  # fmt: skip


# --- the Deployment -------------------------------------------------------------------------


def test_deployment_defaults(default_docs):
    deployment = only(default_docs, "Deployment", "karpenter")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["revisionHistoryLimit"] == 10
    assert spec["strategy"] == {"rollingUpdate": {"maxUnavailable": 1}}
    assert spec["selector"] == {"matchLabels": SELECTOR}
    pod = spec["template"]
    assert pod["metadata"]["labels"] == SELECTOR
    pod = pod["spec"]
    assert pod["serviceAccountName"] == "karpenter"
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["dnsPolicy"] == "ClusterFirst"
    assert pod["schedulerName"] == "default-scheduler"
    assert pod["hostNetwork"] is False
    assert "terminationGracePeriodSeconds" not in pod
    assert pod["securityContext"] == {"fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    assert pod["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}]
            }
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": SELECTOR}}
            ]
        },
    }
    assert pod["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": SELECTOR},
        }
    ]
    assert len(pod["containers"]) == 1
    assert "volumes" not in pod and "initContainers" not in pod and "imagePullSecrets" not in pod


def test_controller_container_defaults(default_docs):
    c = container(default_docs)
    assert c["name"] == "controller"
    assert c["image"] == "ghcr.io/karpenter-rs/controller:0.1.0"
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert "args" not in c and "command" not in c  # the image's entrypoint is `karpenter-rs run`
    assert c["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert c["ports"] == [
        {"name": "http-metrics", "containerPort": 8080, "protocol": "TCP"},
        {"name": "http", "containerPort": 8081, "protocol": "TCP"},
    ]
    assert c["livenessProbe"] == {
        "initialDelaySeconds": 30,
        "timeoutSeconds": 30,
        "httpGet": {"path": "/healthz", "port": "http"},
    }
    assert c["readinessProbe"] == {
        "initialDelaySeconds": 5,
        "timeoutSeconds": 30,
        "httpGet": {"path": "/readyz", "port": "http"},
    }
    assert "resources" not in c


def test_env_with_defaults(default_docs):
    assert env_of(default_docs) == DEFAULT_ENV


def test_upstream_values(upstream_docs):
    deployment = only(upstream_docs, "Deployment", "karpenter")
    assert deployment["spec"]["replicas"] == 1
    c = container(upstream_docs)
    env = dict(env_of(upstream_docs))
    assert env["CLUSTER_NAME"] == "prod-eu-1"
    assert env["INTERRUPTION_QUEUE"] == "Karpenter-prod-eu-1"
    assert env["LOG_LEVEL"] == "debug"
    assert env["FEATURE_GATES"] == (
        "ReservedCapacity=true,SpotToSpotConsolidation=true,NodeRepair=false,"
        "NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false"
    )
    assert "CLUSTER_ENDPOINT" not in env and "CLUSTER_CA_BUNDLE" not in env
    # Everything not overridden keeps the defaults, in the same order.
    overridden = {"CLUSTER_NAME", "INTERRUPTION_QUEUE", "LOG_LEVEL", "FEATURE_GATES"}
    names = [n for n, _ in env_of(upstream_docs)]
    assert [n for n in names if n != "INTERRUPTION_QUEUE"] == [n for n, _ in DEFAULT_ENV]
    assert names.index("INTERRUPTION_QUEUE") == names.index("VM_MEMORY_OVERHEAD_PERCENT") + 1
    assert {k: v for k, v in env.items() if k not in overridden} == {k: v for k, v in DEFAULT_ENV if k not in overridden}
    assert c["resources"] == {"requests": {"cpu": 1, "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "1Gi"}}
    account = only(upstream_docs, "ServiceAccount", "karpenter")
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/KarpenterControllerRole-prod-eu-1"
    }


def test_settings_env_rule(chart):
    """A setting is passed unless null or "": false and 0 are passed, null drops the variable."""
    values = merged(CLUSTER, {
        "settings": {
            "clusterEndpoint": "https://ABC.gr7.eu-west-1.eks.amazonaws.com",
            "clusterCABundle": "LS0tLS1CRUdJTg==",
            "isolatedVPC": True,
            "vmMemoryOverheadPercent": 0,
            "reservedENIs": None,
            "batchMaxDuration": "",
            "featureGates": {"nodeRepair": True, "reservedCapacity": None},
            "awsFeatureGates": {"nodeClassCEL": True},
            "consolidationReplacements": 3,
        },
        "logOutputPaths": ["stdout", "/tmp/karpenter.log"],
    })  # fmt: skip
    env = dict(env_of(render(chart, values)))
    assert env["CLUSTER_ENDPOINT"] == "https://ABC.gr7.eu-west-1.eks.amazonaws.com"
    assert env["CLUSTER_CA_BUNDLE"] == "LS0tLS1CRUdJTg=="
    assert env["ISOLATED_VPC"] == "true"
    assert env["VM_MEMORY_OVERHEAD_PERCENT"] == "0"
    assert "RESERVED_ENIS" not in env
    assert "BATCH_MAX_DURATION" not in env
    assert env["LOG_OUTPUT_PATHS"] == "stdout,/tmp/karpenter.log"
    # A gate set to null gets its upstream default (ReservedCapacity is on by default).
    assert env["FEATURE_GATES"] == (
        "ReservedCapacity=true,SpotToSpotConsolidation=false,NodeRepair=true,"
        "NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false"
    )
    assert env["AWS_FEATURE_GATES"] == "NodeClassCEL=true"
    assert env["CONSOLIDATION_REPLACEMENTS"] == "3"


def test_controller_env_comes_last_so_it_wins(chart):
    values = merged(CLUSTER, {"controller": {"env": [{"name": "LOG_LEVEL", "value": "error"}]}})
    names = [n for n, _ in env_of(render(chart, values))]
    assert names[-1] == "LOG_LEVEL" and names.count("LOG_LEVEL") == 2


def test_image_tag_and_digest(chart):
    values = merged(CLUSTER, {"controller": {"image": {"repository": "registry.example/karpenter-rs", "tag": "1.2.3", "digest": "sha256:" + "a" * 64}}})
    assert container(render(chart, values))["image"] == "registry.example/karpenter-rs:1.2.3@sha256:" + "a" * 64


def test_optional_pod_settings(chart):
    values = merged(CLUSTER, {
        "controller": {
            "args": ["--log-level=debug"],
            "extraVolumeMounts": [{"name": "cfg", "mountPath": "/etc/karpenter"}],
            "sidecarContainer": [{"name": "proxy", "image": "proxy:1"}],
            "sidecarVolumeMounts": [{"name": "cfg", "mountPath": "/cfg"}],
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "envFrom": [{"secretRef": {"name": "extra"}}],
        },
        "extraVolumes": [{"name": "cfg", "configMap": {"name": "cfg"}}],
        "imagePullSecrets": [{"name": "pull"}],
        "terminationGracePeriodSeconds": 0,
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "podLabels": {"team": "platform"},
        "podAnnotations": {"a": "b"},
        "additionalLabels": {"env": "prod"},
        "additionalAnnotations": {"owner": "platform"},
    })  # fmt: skip
    docs = render(chart, values)
    deployment = only(docs, "Deployment")
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"] == {**SELECTOR, "team": "platform"}
    assert pod["metadata"]["annotations"] == {"a": "b"}
    assert deployment["spec"]["selector"] == {"matchLabels": SELECTOR}
    spec = pod["spec"]
    assert spec["terminationGracePeriodSeconds"] == 0
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["imagePullSecrets"] == [{"name": "pull"}]
    assert spec["volumes"] == [{"name": "cfg", "configMap": {"name": "cfg"}}]
    controller, sidecar = spec["containers"]
    assert controller["args"] == ["--log-level=debug"]
    assert controller["volumeMounts"] == [{"name": "cfg", "mountPath": "/etc/karpenter"}]
    assert controller["envFrom"] == [{"secretRef": {"name": "extra"}}]
    assert controller["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert controller["securityContext"]["runAsNonRoot"] is True
    assert sidecar == {"name": "proxy", "image": "proxy:1", "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}
    for doc in docs:
        assert doc["metadata"]["labels"]["env"] == "prod", doc["metadata"]["name"]
        assert doc["metadata"]["annotations"]["owner"] == "platform", doc["metadata"]["name"]


def test_missing_cluster_name_fails_clearly(chart):
    for values in (None, {"settings": {"clusterName": ""}}, {"replicas": 1}):
        with pytest.raises(helm.HelmRenderError, match=re.escape(MISSING_CLUSTER_NAME)):
            chart.render(values, name=RELEASE, namespace=NAMESPACE)


# --- Service, PDB, ServiceAccount, ServiceMonitor -------------------------------------------


def test_service(default_docs):
    service = only(default_docs, "Service", "karpenter")
    assert service["spec"] == {
        "type": "ClusterIP",
        "selector": SELECTOR,
        "ports": [{"name": "http-metrics", "port": 8080, "targetPort": "http-metrics", "protocol": "TCP"}],
    }


def test_pod_disruption_budget(default_docs):
    pdb = only(default_docs, "PodDisruptionBudget", "karpenter")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": SELECTOR}}


def test_existing_service_account(chart):
    values = merged(CLUSTER, {"serviceAccount": {"create": False, "name": "karpenter-irsa"}})
    docs = render(chart, values)
    assert not [d for d in docs if d["kind"] == "ServiceAccount"]
    assert only(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "karpenter-irsa"
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "karpenter-irsa", "namespace": NAMESPACE}]


def test_service_monitor_only_when_enabled(default_docs, upstream_docs):
    assert not [d for d in default_docs if d["kind"] == "ServiceMonitor"]
    monitor = only(upstream_docs, "ServiceMonitor", "karpenter")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"] == {"matchLabels": SELECTOR}
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["spec"]["endpoints"] == [{"port": "http-metrics", "path": "/metrics"}]
    # The Service it selects carries the selector labels and the port it scrapes.
    service = only(upstream_docs, "Service", "karpenter")
    assert SELECTOR.items() <= service["metadata"]["labels"].items()


def test_service_monitor_endpoint_config(chart):
    values = merged(CLUSTER, {"serviceMonitor": {
        "enabled": True,
        "relabelings": [{"action": "replace", "targetLabel": "cluster", "replacement": "c1"}],
        "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*"}],
        "endpointConfig": {"interval": "30s", "scrapeTimeout": "10s"},
        "sampleLimit": 5000,
    }})  # fmt: skip
    spec = only(render(chart, values), "ServiceMonitor")["spec"]
    assert spec["sampleLimit"] == 5000
    assert spec["endpoints"] == [{
        "port": "http-metrics",
        "path": "/metrics",
        "interval": "30s",
        "scrapeTimeout": "10s",
        "relabelings": [{"action": "replace", "targetLabel": "cluster", "replacement": "c1"}],
        "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*"}],
    }]  # fmt: skip


def test_grafana_dashboards_only_when_enabled(default_docs, chart):
    assert not [d for d in default_docs if d["kind"] == "ConfigMap"]
    values = merged(CLUSTER, {"grafanaDashboards": {"enabled": True, "namespace": "monitoring", "annotations": {"grafana_folder": "Karpenter"}}})
    config_map = only(render(chart, values), "ConfigMap", "karpenter-dashboards")
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Karpenter"}
    shipped = sorted(p.name for p in (CHART / "dashboards").glob("*.json"))
    assert sorted(config_map["data"]) == [f"karpenter-rs-{name}" for name in shipped] == [
        "karpenter-rs-capacity.json", "karpenter-rs-performance.json"]
    uids = set()
    for name, text in config_map["data"].items():
        dashboard = json.loads(text)
        assert dashboard == json.loads((CHART / "dashboards" / name.removeprefix("karpenter-rs-")).read_text())
        uids.add(dashboard["uid"])
        assert dashboard["panels"], name
        for panel in dashboard["panels"]:
            assert panel["targets"] and all(t["expr"] for t in panel["targets"]), (name, panel["title"])
    assert len(uids) == 2


def test_prometheus_rule_only_when_enabled(default_docs, chart):
    assert not [d for d in default_docs if d["kind"] == "PrometheusRule"]
    values = merged(CLUSTER, {"prometheusRule": {
        "enabled": True,
        "additionalLabels": {"release": "kube-prometheus-stack"},
        "alertLabels": {"team": "platform"},
        "insufficientCapacityThreshold": 25,
    }})  # fmt: skip
    rule = only(render(chart, values), "PrometheusRule", "karpenter")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert sorted(alerts) == sorted([
        "KarpenterControllerDown", "KarpenterClusterStateNotSynced", "KarpenterNodesNotRegistering",
        "KarpenterLaunchFailures", "KarpenterInsufficientCapacityStorm", "KarpenterPodsUnschedulable",
        "KarpenterDisruptionBlocked", "KarpenterNoLeader", "KarpenterReconcilePanics",
        "KarpenterReconcileStuck"])  # fmt: skip
    for alert in alerts.values():
        assert alert["labels"]["team"] == "platform"
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
    # The job Prometheus gives the ServiceMonitor's targets is the Service's name.
    assert alerts["KarpenterControllerDown"]["expr"] == 'absent(up{job="karpenter"} == 1)'
    assert alerts["KarpenterInsufficientCapacityStorm"]["expr"].endswith("> 25")
    assert alerts["KarpenterLaunchFailures"]["annotations"]["summary"] == "Instance launches fail with {{ $labels.error }}."


# --- RBAC -----------------------------------------------------------------------------------


@pytest.mark.parametrize("docs_fixture", ["default_docs", "upstream_docs"])
def test_rbac_is_exactly_what_the_controllers_use(docs_fixture, request):
    docs = request.getfixturevalue(docs_fixture)
    assert only(docs, "ClusterRole", "karpenter-core")["rules"] == CORE_RULES
    assert only(docs, "ClusterRole", "karpenter")["rules"] == AWS_RULES
    admin = only(docs, "ClusterRole", "karpenter-admin")
    assert admin["rules"] == ADMIN_RULES
    assert admin["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    role = only(docs, "Role", "karpenter")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == LEADER_ELECTION_RULES
    subject = [{"kind": "ServiceAccount", "name": "karpenter", "namespace": NAMESPACE}]
    for kind, name, role_kind in [
        ("ClusterRoleBinding", "karpenter-core", "ClusterRole"),
        ("ClusterRoleBinding", "karpenter", "ClusterRole"),
        ("RoleBinding", "karpenter", "Role"),
    ]:
        binding = only(docs, kind, name)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name}
        assert binding["subjects"] == subject
    # No other RBAC objects.
    assert len([d for d in docs if d["apiVersion"].startswith("rbac.")]) == 7


def test_additional_cluster_role_rules_are_appended(chart):
    extra = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]
    docs = render(chart, merged(CLUSTER, {"additionalClusterRoleRules": extra}))
    assert only(docs, "ClusterRole", "karpenter-core")["rules"] == CORE_RULES + extra


def test_release_in_another_namespace(chart):
    docs = render(chart, CLUSTER, name="kr", namespace="karpenter")
    deployment = only(docs, "Deployment", "kr-karpenter")
    assert deployment["metadata"]["namespace"] == "karpenter"
    assert only(docs, "Role", "kr-karpenter")["metadata"]["namespace"] == "karpenter"
    assert only(docs, "RoleBinding", "kr-karpenter")["subjects"][0]["namespace"] == "karpenter"
    assert dict(env_of(docs))["KARPENTER_SERVICE"] == "kr-karpenter"
    assert only(docs, "PodDisruptionBudget")["metadata"]["name"] == "karpenter"


def test_pod_affinity_terms_get_the_release_selector(chart):
    own = {"matchLabels": {"app": "other"}}
    values = merged(CLUSTER, {"affinity": {
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone"}},
        ]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname"},
            {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": own},
        ]},
    }, "topologySpreadConstraints": [
        {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": own},
    ]})  # fmt: skip
    pod = only(render(chart, values), "Deployment")["spec"]["template"]["spec"]
    affinity = pod["affinity"]
    # Values merge: the default nodeAffinity stays.
    assert "nodeAffinity" in affinity
    preferred = affinity["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert preferred["podAffinityTerm"]["labelSelector"] == {"matchLabels": SELECTOR}
    required = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t.get("labelSelector") for t in required] == [{"matchLabels": SELECTOR}, own]
    assert pod["topologySpreadConstraints"][0]["labelSelector"] == own
