#!/usr/bin/env bash
# Regenerate README.md's component table ("What it installs") from the
# catalog. tests/unit/test_catalog.py fails when the two differ.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" "$ROOT/.venv/bin/python" -c '
from pathlib import Path
from modelplane.catalog.reference import readme_with_components_table
readme = Path("README.md")
readme.write_text(readme_with_components_table(readme.read_text()))
'
echo "readme-components: wrote the table in README.md"
