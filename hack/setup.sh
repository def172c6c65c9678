#!/usr/bin/env bash
# One-step development setup: install modelplane (editable, with dev extras)
# and build the integration-test binaries.  Safe to re-run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"

echo "setup: pip install -e '.[dev]' in $ROOT (python: $(command -v "$PYTHON"))"
(cd "$ROOT" && "$PYTHON" -m pip install --quiet --disable-pip-version-check -e '.[dev]')

echo "setup: building integration-test binaries"
"$ROOT/hack/build-testbin.sh"

echo "setup: done; run every test with: python -m pytest"
