#!/usr/bin/env bash
# Try `karpenter-rs run` on your machine: a real control plane (hack/control-plane.sh, built from
# Debian packages and cached; ~15 minutes the first time, seconds afterwards), the manifests you
# pass (default: examples/quickstart.yaml), and the controller with the simulated cloud, whose
# stand-in kubelet registers the Nodes it "launches". Ctrl-C stops the controller and the
# control plane.
#
#   hack/run-local.sh [MANIFEST...]
#   # in another shell:
#   export KUBECONFIG=${K8S_RUN:-/tmp/karpenter-rs-local}/admin.kubeconfig
#   kubectl get nodeclaims,nodes,pods -o wide -w
set -euo pipefail
cd "$(dirname "$0")/.."
export K8S_RUN="${K8S_RUN:-/tmp/karpenter-rs-local}"
trap 'hack/control-plane.sh down' EXIT
hack/control-plane.sh up
export KUBECONFIG="$K8S_RUN/admin.kubeconfig"
cargo build --release --locked
for manifest in "${@:-examples/quickstart.yaml}"; do
  kubectl apply -f "$manifest"
done
echo "watch it: export KUBECONFIG=$KUBECONFIG; kubectl get nodeclaims,nodes,pods -o wide -w" >&2
target/release/karpenter-rs run --cloud-provider simulated --disable-leader-election
