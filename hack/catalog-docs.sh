#!/usr/bin/env bash
# Regenerate the component table of docs/catalog.md ("What it installs") from
# the catalog. tests/unit/test_catalog.py fails when the two differ.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" "$ROOT/.venv/bin/python" -c '
from pathlib import Path
from modelplane.catalog.reference import with_components_table
catalog = Path("docs/catalog.md")
catalog.write_text(with_components_table(catalog.read_text()))
'
echo "catalog-docs: wrote the table in docs/catalog.md"
