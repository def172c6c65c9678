"""What the product hands helm and client-go comes back as it was written."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from modelplane.untrusted import load_yaml
from modelplane.wire import for_go

# Strings PyYAML writes unquoted that Kubernetes' YAML reads as something else.
TRICKY = ["y", "n", "yes", "off", "1e3", "0o17", "08", "+.5", "=", "~", "null", "0x1F", "1_000"]


@pytest.mark.parametrize("text", TRICKY)
def test_a_string_reaches_helm_as_that_string(text: str) -> None:
    values: dict[str, Any] = {"password": text, "list": [text], "nested": {"k": text}}
    assert load_yaml(for_go(values)) == values


def test_pyyaml_would_have_written_them_changed() -> None:
    # The reason for for_go: these reached helm as bools and numbers.
    changed = [t for t in TRICKY if load_yaml(yaml.safe_dump({"v": t})) != {"v": t}]
    assert {"y", "n", "1e3", "0o17", "08", "+.5"} <= set(changed), changed


def test_numbers_bools_and_unicode_keep_their_types() -> None:
    values = {"replicas": 2, "ratio": 0.5, "on": True, "none": None, "name": "café"}
    assert load_yaml(for_go(values)) == values
