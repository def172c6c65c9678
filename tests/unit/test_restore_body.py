"""What a restore of a release's object sends: its stored body as a strategic merge patch."""

from __future__ import annotations

from typing import Any

import pytest

from modelplane.actions.restore import comparable, patch_body


@pytest.mark.parametrize(
    ("body", "sent"),
    [
        ({"spec": {"replicas": 2}}, {"spec": {"replicas": 2}}),
        # A null in a merge patch deletes; an empty value sets nothing kept.
        ({"spec": {"a": None, "b": {}, "c": [], "d": 0, "e": ""}}, {"spec": {"d": 0, "e": ""}}),
        # A forged revision's patch directives never reach the API server.
        ({"$patch": "delete", "spec": {"x": 1}}, {"spec": {"x": 1}}),
        (
            {"spec": {"containers": [{"name": "a", "$patch": "delete"}], "$retainKeys": ["x"]}},
            {"spec": {"containers": [{"name": "a"}]}},
        ),
        ({"spec": {"$setElementOrder/containers": [{"name": "a"}]}}, {}),
    ],
)
def test_patch_body(body: dict[str, Any], sent: dict[str, Any]) -> None:
    assert patch_body(body) == sent


def test_comparable_leaves_out_what_every_write_changes() -> None:
    obj = {
        "metadata": {"name": "a", "resourceVersion": "7", "generation": 2, "managedFields": []},
        "spec": {"x": 1},
        "status": {"ready": 1},
    }
    assert comparable(obj) == {"metadata": {"name": "a"}, "spec": {"x": 1}}
