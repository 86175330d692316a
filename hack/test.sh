#!/usr/bin/env bash
# The project's test command (README): the whole test suite, locked to Cargo.lock, with a real
# Kubernetes control plane for tests/control_plane.rs (hack/control-plane.sh: built from Debian
# packages and cached under ~/.cache/k8s-debian, ~15 minutes the first time; started here and
# stopped by PID on exit). SKIP_CONTROL_PLANE_TESTS=1 leaves that test binary out.
# Then the Helm chart tests (tests/chart/), in a venv under the cargo target dir; they need only
# python3 >= 3.10 and pip (Helm itself comes as a PyPI wheel). SKIP_CHART_TESTS=1 skips them.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${SKIP_CONTROL_PLANE_TESTS:-}" = 1 ]; then
  skip=()
  for t in tests/*.rs; do
    name=$(basename "$t" .rs)
    [ "$name" = control_plane ] || skip+=(--test "$name")
  done
  cargo test --locked --lib --bins "${skip[@]}" "$@"
else
  export K8S_RUN="${K8S_RUN:-${CARGO_TARGET_DIR:-$PWD/target}/k8s-run}"
  trap 'hack/control-plane.sh down' EXIT
  hack/control-plane.sh up
  KARPENTER_RS_TEST_KUBECONFIG="$K8S_RUN/admin.kubeconfig" cargo test --locked "$@"
fi

if [ "${SKIP_CHART_TESTS:-}" = 1 ]; then
  exit 0
fi

venv="${CARGO_TARGET_DIR:-target}/chart-venv"
requirements=tests/chart/requirements.txt

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "hack/test.sh: the chart tests need python3 >= 3.10 (found $(python3 --version 2>&1))" >&2
    exit 1
  fi
  # Debian's python3 ships venv without ensurepip; python3-venv adds it.
  if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    else
      echo "hack/test.sh: python3 cannot create a venv; install python3-venv (Debian/Ubuntu)" >&2
      exit 1
    fi
  fi
  rm -rf "$venv"
  python3 -m venv "$venv"
fi

# Install the pinned requirements once; again only when the file changes.
if ! cmp -s "$requirements" "$venv/requirements.installed"; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$venv/requirements.installed"
fi

# No .pytest_cache or __pycache__ in the work tree.
PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/chart
