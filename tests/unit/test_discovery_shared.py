"""Targets that serve the same APIs share one discovery answer; others keep their own."""

from __future__ import annotations

import gc
import weakref

import pytest

from modelplane.kube.discovery import Served, shared


def _served(extra: tuple[str, str, str, str] | None = None) -> Served:
    served = Served()
    for add in [("", "v1", "pods", "Pod"), ("apps", "v1", "deployments", "Deployment")]:
        served.add(*add)
    if extra:
        served.add(*extra)
    return served


@pytest.mark.parametrize(
    ("other", "same"),
    [
        (None, True),
        (("gateway.networking.k8s.io", "v1", "gateways", "Gateway"), False),
        # The same resource under another kind is another answer.
        (("apps", "v1", "deployments", "Deploy"), False),
    ],
)
def test_one_answer_is_kept_once(other: tuple[str, str, str, str] | None, same: bool) -> None:
    first = shared(_served())
    assert (shared(_served(other)) is first) is same


def test_a_shared_answer_goes_when_no_target_holds_it() -> None:
    kept = shared(_served(("only.here", "v1", "things", "Thing")))
    ref = weakref.ref(kept)
    del kept
    gc.collect()
    assert ref() is None
