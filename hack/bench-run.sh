#!/usr/bin/env bash
# End-to-end benchmark of `karpenter-rs run` on the local control plane with the simulated cloud:
# N pending pods (default 1000; 250m CPU / 256Mi each) to N bound pods, timed from the
# Deployment's creation, and the controller's peak RSS (VmHWM). Figures go to benches/README.md.
#
#   hack/bench-run.sh [PODS]
set -euo pipefail
cd "$(dirname "$0")/.."
pods="${1:-1000}"
export K8S_RUN="${K8S_RUN:-/tmp/karpenter-rs-bench}"
controller=
trap '[ -n "$controller" ] && kill "$controller" 2>/dev/null; hack/control-plane.sh down' EXIT
hack/control-plane.sh up >/dev/null
export KUBECONFIG="$K8S_RUN/admin.kubeconfig"
cargo build --release --locked -q
kubectl apply -f - >/dev/null <<YAML
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole-bench
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: bench}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: bench}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
YAML
target/release/karpenter-rs run --cloud-provider simulated --disable-leader-election \
  > "$K8S_RUN/controller.log" 2>&1 &
controller=$!
sleep 2
start=$(date +%s.%N)
kubectl apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: inflate, namespace: default}
spec:
  replicas: $pods
  selector: {matchLabels: {app: inflate}}
  template:
    metadata: {labels: {app: inflate}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: inflate
        image: public.ecr.aws/eks-distro/kubernetes/pause:3.7
        resources: {requests: {cpu: 250m, memory: 256Mi}}
YAML
while :; do
  bound=$(kubectl get pods -n default -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c . || true)
  [ "$bound" -ge "$pods" ] && break
  sleep 1
done
end=$(date +%s.%N)
echo "pods bound: $bound in $(echo "$end - $start" | bc) s"
echo "nodeclaims: $(kubectl get nodeclaims --no-headers | wc -l), nodes: $(kubectl get nodes --no-headers | wc -l)"
grep -E 'VmHWM|VmRSS' "/proc/$controller/status"
