#!/usr/bin/env bash
# The project's test command (README): the whole test suite, locked to Cargo.lock.
# - tests/control_plane.rs runs `karpenter-rs run` against a real Kubernetes control plane (with
#   Debian's Prometheus scraping it, installed here when missing), and
#   tests/disruption_control_plane.rs and tests/disruption_faults.rs run its controllers in process
#   against it
#   (hack/control-plane.sh: built from Debian packages and cached under ~/.cache/k8s-debian, about
#   15 minutes the first time; started here and stopped by PID on exit);
#   SKIP_CONTROL_PLANE_TESTS=1 leaves those test binaries out.
# - tests/aws_moto.rs runs the AWS provider against moto_server from a venv under the cargo target
#   dir (moto-venv, pinned by tests/moto/requirements.txt); SKIP_AWS_TESTS=1 skips them.
# - Then the Helm chart tests (tests/chart/), in another venv there (chart-venv); they need only
#   python3 >= 3.10 and pip (Helm itself comes as a PyPI wheel). With the control plane, they also
#   helm-install the chart into it and run the controller with the chart's RBAC.
#   SKIP_CHART_TESTS=1 skips them.
# Every part runs even when an earlier one failed (cargo test with --no-fail-fast, so every test
# binary too); the last line sums up which parts failed, and the exit status is then non-zero.
# If the control plane does not come up, that is a failed part and the tests needing it stay out.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"

# ensure_venv DIR REQUIREMENTS: a venv at DIR with REQUIREMENTS installed (again only when the
# file changes).
ensure_venv() {
  local venv=$1 requirements=$2
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
      echo "hack/test.sh: the Python-backed tests need python3 >= 3.10 (found $(python3 --version 2>&1))" >&2
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
  if ! cmp -s "$requirements" "$venv/requirements.installed"; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/requirements.installed"
  fi
}

if [ "${SKIP_AWS_TESTS:-}" != 1 ]; then
  ensure_venv "$target/moto-venv" tests/moto/requirements.txt
  MOTO_PYTHON="$(cd "$target/moto-venv/bin" && pwd)/python"
  export MOTO_PYTHON
fi

# The parts that failed, for the summary.
failed=()

# part NAME COMMAND...: runs COMMAND in a subshell with errexit in force (it would be off inside
# an `if` or `||`), leaves its exit status in $part_status and records NAME as failed when it
# fails.
part_status=0
part() {
  local name=$1
  shift
  set +e
  (set -e; "$@")
  part_status=$?
  set -e
  if [ "$part_status" != 0 ]; then failed+=("$name"); fi
}

# cargo test over every target even after one fails, its output kept in $cargo_log to name the
# failed targets in the summary.
cargo_log="$target/cargo-test.log"
cargo_test() {
  mkdir -p "$target"
  cargo test --locked --no-fail-fast "$@" 2>&1 | tee "$cargo_log"
}

# Debian's Prometheus scrapes the controller in tests/control_plane.rs (started there by PID on a
# free loopback port; only the binaries are needed).
if [ "${SKIP_CONTROL_PLANE_TESTS:-}" != 1 ] && ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    echo "hack/test.sh: the control-plane tests need Prometheus; install Debian's prometheus package" >&2
    exit 1
  fi
fi

control_plane=
if [ "${SKIP_CONTROL_PLANE_TESTS:-}" != 1 ]; then
  K8S_RUN="${K8S_RUN:-$(mkdir -p "$target" && cd "$target" && pwd)/k8s-run}"
  export K8S_RUN
  trap 'hack/control-plane.sh down' EXIT
  part "control plane (hack/control-plane.sh up)" hack/control-plane.sh up
  if [ "$part_status" = 0 ]; then control_plane=1; fi
fi

if [ -n "$control_plane" ]; then
  export KARPENTER_RS_TEST_KUBECONFIG="$K8S_RUN/admin.kubeconfig"
  part "cargo test" cargo_test "$@"
else
  # Without a control plane (skipped, or it did not come up), the binaries that need one stay out.
  only=()
  for t in tests/*.rs; do
    name=$(basename "$t" .rs)
    case "$name" in *control_plane | disruption_faults) ;; *) only+=(--test "$name") ;; esac
  done
  part "cargo test" cargo_test --lib --bins "${only[@]}" "$@"
fi
if [ "$part_status" != 0 ]; then
  # cargo names each failed target as `--test NAME` (or `--lib`, `--bin NAME`, `--doc`).
  targets=$(grep -oE '`--(lib|bins?|doc|bin [^`]+|test [^`]+)`' "$cargo_log" | tr -d '`' | sort -u |
    paste -sd, - | sed 's/,/, /g' || true)
  if [ -n "$targets" ]; then failed[-1]="cargo test ($targets)"; fi
fi

# With the control plane still up, tests/chart/test_install.py installs the chart into it and runs
# the binary the Rust tests built as the chart's ServiceAccount.
chart_tests() {
  ensure_venv "$target/chart-venv" tests/chart/requirements.txt
  local chart_env=()
  if [ -n "$control_plane" ]; then
    chart_env=(KARPENTER_RS_BIN="$(cd "$target/debug" && pwd)/karpenter-rs")
  fi
  # No .pytest_cache or __pycache__ in the work tree.
  env "${chart_env[@]}" PYTHONDONTWRITEBYTECODE=1 \
    "$target/chart-venv/bin/python" -m pytest -q -p no:cacheprovider tests/chart
}
if [ "${SKIP_CHART_TESTS:-}" != 1 ]; then
  part "chart tests" chart_tests
fi

if [ ${#failed[@]} != 0 ]; then
  summary=$(printf '%s; ' "${failed[@]}")
  echo "hack/test.sh: FAILED: ${summary%; }"
  exit 1
fi
echo "hack/test.sh: all parts passed"
