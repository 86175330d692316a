#!/usr/bin/env bash
# The running controller at cluster scale (benches/scale.rs): starts a control plane of its own
# (run directory and ports apart from the test suite's), builds the release binary, runs the
# benchmark, and stops the control plane by PID on exit. Not part of the test command.
#
#   hack/scale-bench.sh [PODS]     # default 5000; results are Markdown rows on stdout
set -euo pipefail
cd "$(dirname "$0")/.."
export K8S_RUN="${K8S_RUN:-$PWD/target/k8s-scale}"
export APISERVER_PORT="${APISERVER_PORT:-36443}" ETCD_PORT="${ETCD_PORT:-32379}"
export KCM_PORT="${KCM_PORT:-30257}" SCHED_PORT="${SCHED_PORT:-30259}" CRD_PORT="${CRD_PORT:-36444}"
trap 'hack/control-plane.sh down' EXIT
hack/control-plane.sh up
cargo build --release --locked
KUBECONFIG="$K8S_RUN/admin.kubeconfig" CRD_KUBECONFIG="$K8S_RUN/crd.kubeconfig" SCALE_PODS="${1:-5000}" \
  cargo bench --locked --bench scale
