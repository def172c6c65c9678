#!/usr/bin/env bash
# Regenerate the docs made from the catalog: the component table of
# docs/catalog.md ("What it installs") and the whole of docs/requirements.md
# (`modelplane requirements`). tests/unit/test_catalog.py and
# tests/unit/test_docs.py fail when either differs from the catalog.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" "$ROOT/.venv/bin/python" -c '
from pathlib import Path
from modelplane.catalog.reference import requirements_markdown, with_components_table
catalog = Path("docs/catalog.md")
catalog.write_text(with_components_table(catalog.read_text()))
Path("docs/requirements.md").write_text(requirements_markdown())
'
echo "catalog-docs: wrote the table in docs/catalog.md and docs/requirements.md"
