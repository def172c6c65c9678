"""Helm's storage name for a revision: written and read by one rule."""

from __future__ import annotations

import pytest

from modelplane.observe.storage_name import parse_storage_name, storage_name


def test_a_written_name_reads_back_as_its_release_and_revision() -> None:
    assert storage_name("mp-cert-manager", 12) == "sh.helm.release.v1.mp-cert-manager.v12"
    assert parse_storage_name(storage_name("mp-cert-manager", 12)) == ("mp-cert-manager", 12)
    # A release name may itself hold ".v<n>": the last one is the revision.
    assert parse_storage_name("sh.helm.release.v1.a.v2.v3") == ("a.v2", 3)


@pytest.mark.parametrize(
    "name",
    [
        "sh.helm.release.v1.mp-cert-manager.v0",
        "sh.helm.release.v1.mp-cert-manager.v01",
        "sh.helm.release.v1.mp-cert-manager.v1234567890",
        "sh.helm.release.v1.mp-cert-manager",
        "sh.helm.release.v2.mp-cert-manager.v1",
        "xsh.helm.release.v1.mp-cert-manager.v1",
    ],
)
def test_a_name_helm_would_not_write_is_no_revision(name: str) -> None:
    assert parse_storage_name(name) is None
