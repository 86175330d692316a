#!/usr/bin/env bash
# The project's test command (README): the whole test suite, locked to Cargo.lock.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked "$@"
