#!/usr/bin/env bash
# Regenerate the chart's copy of the ServingStack CRD from the models
# (`modelplane crds`). tests/unit/test_chart.py fails when the two differ.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/.venv/bin/modelplane" crds > "$ROOT/deploy/chart/crds/servingstacks.yaml"
echo "chart-crds: wrote deploy/chart/crds/servingstacks.yaml"
