"""The chart installed into a real API server, and the controller run with the chart's RBAC.

hack/test.sh exports KARPENTER_RS_TEST_KUBECONFIG (the control plane of hack/control-plane.sh:
kube-apiserver 1.20 with RBAC authorization, the admin in system:masters) and KARPENTER_RS_BIN
(the binary the Rust tests built). Without them these tests are skipped, like the control-plane
tests are left out with SKIP_CONTROL_PLANE_TESTS=1.

1. `helm install` with the Helm SDK creates the release's objects, read back from the server.
   CRDs are skipped: on this hybrid control plane the karpenter CRDs live on the CRD server
   (apiextensions 1.36, for CEL), where hack/control-plane.sh created them and from where
   kube-apiserver serves them through the aggregation layer; the same CRDs in the 1.20 server
   would shadow them. The test checks they are served instead.
2. `karpenter-rs run --cloud-provider simulated`, authenticating as the chart's ServiceAccount
   (kubeconfig impersonation), provisions nodes for pending pods and terminates them again. Any
   API call the chart's RBAC does not allow is a 403 in its log, and fails the test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import helm_python as helm
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "karpenter"
KUBECONFIG = os.environ.get("KARPENTER_RS_TEST_KUBECONFIG")
BINARY = os.environ.get("KARPENTER_RS_BIN")
RELEASE = "karpenter"
NAMESPACE = "karpenter-chart-test"
APP_NAMESPACE = "karpenter-chart-test-app"
# How long any wait here (and any one kubectl or Helm call) may take, as the Rust control-plane
# tests' PATIENCE (tests/k8s/harness.rs): generous, since on a loaded machine the API server and
# the controller can be many times slower than usual; a wait ends as soon as its condition holds.
PATIENCE = 180
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{RELEASE}"

pytestmark = pytest.mark.skipif(
    not (KUBECONFIG and BINARY),
    reason="needs KARPENTER_RS_TEST_KUBECONFIG and KARPENTER_RS_BIN (hack/test.sh sets both)",
)


def kubectl(*args: str, check: bool = True, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", KUBECONFIG, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr}")
    return done.stdout


def kubectl_json(*args: str) -> dict:
    return json.loads(kubectl(*args, "-o", "json"))


def wait_for(what: str, check):
    deadline = time.monotonic() + PATIENCE
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {PATIENCE}s waiting for {what}"
        time.sleep(0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cleanup() -> None:
    """Removes what these tests create, so reruns and other tests start clean."""
    # The controller is stopped by now: its finalizers are stripped, or deletions would hang.
    names = [
        name
        for kind in ("nodeclaims.karpenter.sh", "nodes")
        for name in kubectl("get", kind, "-l", "karpenter.sh/nodepool=chart-test", "-o", "name", check=False).split()
    ]
    names += ["nodepools.karpenter.sh/chart-test", "ec2nodeclasses.karpenter.k8s.aws/chart-test"]
    for name in names:
        kubectl("patch", name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)
        kubectl("delete", name, "--ignore-not-found", "--wait=false", check=False)
    kubectl("delete", "clusterrolebinding,clusterrole", "karpenter-chart-test-kubelet", "--ignore-not-found", check=False)
    with helm.Config(kubeconfig_path=KUBECONFIG, namespace=NAMESPACE) as config:
        config.uninstall(RELEASE, ignore_not_found=True, timeout=PATIENCE)
    for ns in (APP_NAMESPACE, NAMESPACE):
        kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false", check=False)
    wait_for(
        "the test namespaces to go",
        lambda: not kubectl("get", "namespace", NAMESPACE, APP_NAMESPACE, "--ignore-not-found", "-o", "name", check=False).strip(),
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    cleanup()
    chart = tmp_path_factory.mktemp("chart") / "karpenter"
    shutil.copytree(CHART, chart, ignore=shutil.ignore_patterns("crds"))
    with helm.Config(kubeconfig_path=KUBECONFIG, namespace=NAMESPACE) as config:
        release = config.install(
            chart,
            RELEASE,
            {"settings": {"clusterName": "chart-test"}, "replicas": 1},
            namespace=NAMESPACE,
            create_namespace=True,
            timeout=PATIENCE,
        )
    yield release
    cleanup()


def test_helm_install_creates_the_release_objects(installed):
    assert installed["name"] == RELEASE, installed.keys()
    assert installed["chart_name"] == "karpenter"
    assert installed["status"] == "deployed", installed.keys()
    deployment = kubectl_json("-n", NAMESPACE, "get", "deployment", RELEASE)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == RELEASE
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}
    assert env["CLUSTER_NAME"]["value"] == "chart-test"
    assert deployment["spec"]["replicas"] == 1
    kubectl("-n", NAMESPACE, "get", "serviceaccount", RELEASE)
    kubectl("-n", NAMESPACE, "get", "service", RELEASE)
    kubectl("-n", NAMESPACE, "get", "poddisruptionbudget", "karpenter")
    kubectl("-n", NAMESPACE, "get", "role,rolebinding", RELEASE)
    for name in (f"{RELEASE}-core", RELEASE):
        kubectl("get", "clusterrole,clusterrolebinding", name)
    admin = kubectl_json("get", "clusterrole", f"{RELEASE}-admin")
    assert admin["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    # The API server itself says what the ServiceAccount may do.
    def can(verb: str, resource: str, *extra: str) -> bool:
        out = kubectl("auth", "can-i", verb, resource, "--as", SERVICE_ACCOUNT, *extra, check=False)
        return out.strip() == "yes"

    assert can("create", "nodeclaims.karpenter.sh")
    assert can("create", "events.events.k8s.io", "-n", "default")
    assert can("create", "pods", "--subresource=eviction", "-n", "default")
    assert can("update", "leases.coordination.k8s.io/karpenter-leader-election", "-n", NAMESPACE)
    assert not can("update", "leases.coordination.k8s.io/other", "-n", NAMESPACE)
    assert not can("delete", "nodepools.karpenter.sh")
    assert not can("get", "secrets", "-n", NAMESPACE)


def test_the_crds_are_served(installed):
    # Installed with CRDs skipped (see the module docstring): the API serves them anyway.
    served = {
        group: {r["name"] for r in json.loads(kubectl("get", "--raw", f"/apis/{group}/v1"))["resources"]}
        for group in ("karpenter.sh", "karpenter.k8s.aws")
    }
    assert {"nodepools", "nodepools/status", "nodeclaims", "nodeclaims/status"} <= served["karpenter.sh"]
    assert {"ec2nodeclasses", "ec2nodeclasses/status"} <= served["karpenter.k8s.aws"]


def impersonating_kubeconfig(path: Path) -> Path:
    """The admin kubeconfig, acting as the chart's ServiceAccount (the admin may impersonate)."""
    config = yaml.safe_load(Path(KUBECONFIG).read_text())
    for user in config["users"]:
        user["user"]["as"] = SERVICE_ACCOUNT
        user["user"]["as-groups"] = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]
    path.write_text(yaml.safe_dump(config))
    return path


# What the simulated cloud's stand-in kubelet does: register Nodes and renew their Leases. In a
# real cluster each kubelet does this with its own credentials, so the chart does not grant it;
# the test grants it separately, and everything else the controller does must fit the chart.
STAND_IN_KUBELET = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: karpenter-chart-test-kubelet}
rules:
  - {apiGroups: [""], resources: [nodes], verbs: [create]}
  - {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [create, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: karpenter-chart-test-kubelet}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: karpenter-chart-test-kubelet}
subjects: [{kind: ServiceAccount, name: karpenter, namespace: karpenter-chart-test}]
"""

OBJECTS = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: chart-test}
spec:
  role: KarpenterNodeRole-test
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: chart-test}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: chart-test}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
"""

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: inflate, namespace: karpenter-chart-test-app}
spec:
  replicas: 4
  selector: {matchLabels: {app: inflate}}
  template:
    metadata: {labels: {app: inflate}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: inflate
          image: public.ecr.aws/eks-distro/kubernetes/pause:3.7
          resources: {requests: {cpu: "1"}}
"""


def managed(kind: str) -> list[str]:
    return kubectl("get", kind, "-l", "karpenter.sh/nodepool=chart-test", "-o", "name").split()


def test_the_controller_runs_a_provisioning_and_termination_cycle_with_the_charts_rbac(installed, tmp_path):
    kubectl("apply", "-f", "-", stdin=STAND_IN_KUBELET)
    kubeconfig = impersonating_kubeconfig(tmp_path / "karpenter.kubeconfig")
    log_path = tmp_path / "controller.log"
    metrics_port, health_port = free_port(), free_port()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "AWS_"))
    } | {
        "KUBECONFIG": str(kubeconfig),
        "SYSTEM_NAMESPACE": NAMESPACE,
        "POD_NAME": "chart-test-controller",
        "CLUSTER_NAME": "chart-test",
    }
    with open(log_path, "w") as log:
        controller = subprocess.Popen(
            [BINARY, "run", "--cloud-provider", "simulated", f"--metrics-port={metrics_port}", f"--health-probe-port={health_port}"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        kubectl("create", "namespace", APP_NAMESPACE)
        wait_for(
            "the default ServiceAccount",
            lambda: kubectl("-n", APP_NAMESPACE, "get", "serviceaccount", "default", "--ignore-not-found", "-o", "name").strip(),
        )
        kubectl("apply", "-f", "-", stdin=OBJECTS)
        kubectl("apply", "-f", "-", stdin=DEPLOYMENT)

        def bound() -> int:
            pods = kubectl_json("-n", APP_NAMESPACE, "get", "pods")["items"]
            return sum(1 for p in pods if p["spec"].get("nodeName"))

        wait_for("4 bound pods", lambda: bound() == 4)
        assert managed("nodeclaims.karpenter.sh")
        # The lease the controller holds as leader, in the release namespace.
        lease = kubectl_json("-n", NAMESPACE, "get", "lease", "karpenter-leader-election")
        # The identity is the pod name plus a per-process suffix, as controller-runtime's.
        assert lease["spec"]["holderIdentity"].startswith("chart-test-controller_")

        # Termination with the pods still there (the drain evicts them), then without.
        first = managed("nodeclaims.karpenter.sh")
        for name in first:
            kubectl("delete", name, "--wait=false")
        wait_for(
            "the first NodeClaims' drain and termination",
            lambda: not set(first) & set(managed("nodeclaims.karpenter.sh")),
        )
        kubectl("-n", APP_NAMESPACE, "delete", "deployment", "inflate")

        def all_gone() -> bool:
            claims = managed("nodeclaims.karpenter.sh")
            for name in claims:
                kubectl("delete", name, "--wait=false", check=False)
            return not claims and not managed("nodes")

        wait_for("every NodeClaim and Node to be terminated", all_gone)
        assert urllib.request.urlopen(f"http://127.0.0.1:{health_port}/healthz", timeout=PATIENCE).status == 200
    finally:
        controller.send_signal(signal.SIGTERM)
        try:
            controller.wait(timeout=30)
        except subprocess.TimeoutExpired:
            controller.kill()
            controller.wait()
    log = log_path.read_text()
    refused = [line for line in log.splitlines() if "forbidden" in line.lower() or " 403" in line or '"code":403' in line]
    assert not refused, "calls the chart's RBAC refuses:\n" + "\n".join(refused)
    assert "launched nodeclaim" in log and "deleted nodeclaim" in log, log
