"""``--crds PATH``: which YAML files it reads, and what it refuses, without an API server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from tests.testenv.env import TestEnvError
from tests.testenv.kube import crd_documents, yaml_files


def _crd(plural: str) -> dict[str, object]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.example.com"},
        "spec": {"group": "example.com"},
    }


def _folder(root: Path, plural: str) -> Path:
    root.mkdir(parents=True)
    (root / "crds.yaml").write_text(yaml.safe_dump(_crd(plural)))
    return root


def test_a_folder_of_links_to_folders_reads_the_folders_they_point_at(tmp_path: Path) -> None:
    _folder(tmp_path / "upstream" / "widgets", "widgets")
    _folder(tmp_path / "upstream" / "gadgets", "gadgets")
    picked = tmp_path / "picked"
    picked.mkdir()
    (picked / "widgets").symlink_to(tmp_path / "upstream" / "widgets")
    (picked / "gadgets").symlink_to(tmp_path / "upstream" / "gadgets", target_is_directory=True)
    (picked / "one.yaml").symlink_to(tmp_path / "upstream" / "widgets" / "crds.yaml")

    names = sorted(d["metadata"]["name"] for d in crd_documents([picked]))
    assert names == ["gadgets.example.com", "widgets.example.com", "widgets.example.com"]


def test_a_link_back_up_the_tree_is_read_once_and_ends(tmp_path: Path) -> None:
    root = _folder(tmp_path / "crds", "widgets")
    (root / "loop").symlink_to(root)
    (root / "again").symlink_to(root)
    assert yaml_files(root) == [root / "crds.yaml"]
    assert [d["metadata"]["name"] for d in crd_documents([root])] == ["widgets.example.com"]


def test_a_link_to_nothing_is_refused_naming_it(tmp_path: Path) -> None:
    root = _folder(tmp_path / "crds", "widgets")
    (root / "gone").symlink_to(tmp_path / "moved-away")
    with pytest.raises(TestEnvError) as err:
        yaml_files(root)
    assert (
        str(err.value)
        == f"--crds: {root / 'gone'} is a link to {tmp_path / 'moved-away'}, which is not there"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a folder whatever its mode says")
def test_a_folder_that_cannot_be_read_is_refused_naming_it(tmp_path: Path) -> None:
    root = _folder(tmp_path / "crds", "widgets")
    closed = _folder(root / "closed", "gadgets")
    closed.chmod(0)
    try:
        with pytest.raises(TestEnvError) as err:
            yaml_files(root)
    finally:
        closed.chmod(0o755)
    assert str(err.value) == f"--crds: cannot read {closed}: Permission denied"


def test_a_path_that_is_not_there_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TestEnvError, match="is neither a file nor a directory"):
        crd_documents([tmp_path / "nowhere"])


def test_a_path_with_no_crd_is_refused_rather_than_applying_nothing(tmp_path: Path) -> None:
    root = tmp_path / "crds"
    root.mkdir()
    (root / "cm.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    )
    with pytest.raises(TestEnvError) as err:
        crd_documents([_folder(tmp_path / "good", "widgets"), root])
    assert str(err.value) == (
        f"--crds: no CustomResourceDefinition or DeviceClass in the YAML files under {root}"
    )
