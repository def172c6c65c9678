"""A chart repository URL's credentials, taken out for helm's repository or registry file."""

from __future__ import annotations

import base64
import json

import pytest
import yaml

from modelplane.actions.chart_repository import (
    ALIAS,
    RepositoryLogin,
    registry_file,
    repository_file,
    repository_login,
)


@pytest.mark.parametrize(
    ("url", "login"),
    [
        (
            "https://user:t0ken@mirror.example:8443/charts",
            RepositoryLogin("https://mirror.example:8443/charts", "user", "t0ken"),
        ),
        # decoded, as Go sends them; an unescaped @ stays in the password
        (
            "http://us%3Aer:p%40ss@m.example/",
            RepositoryLogin("http://m.example/", "us:er", "p@ss"),
        ),
        ("https://user:p@ss@m.example/c", RepositoryLogin("https://m.example/c", "user", "p@ss")),
        # without both, helm's repository file would send nothing: left as it is
        ("https://token@m.example/c", None),
        ("https://:t0ken@m.example/c", None),
        ("https://m.example/c", None),
        # an OCI registry's, which helm takes in no reference at all
        (
            "oci://user:t0ken@registry.example:5000/charts",
            RepositoryLogin("oci://registry.example:5000/charts", "user", "t0ken"),
        ),
        ("oci://registry.example/charts", None),
        ("ftp://u:p@m.example/x", None),
        ("http://u:p@[not-v6/x", None),
    ],
)
def test_repository_login(url: str, login: RepositoryLogin | None) -> None:
    assert repository_login(url) == login


def test_the_repository_file_holds_the_one_repository_quoted() -> None:
    login = RepositoryLogin("https://m.example/c", "user", "t0ken: #'\"\n[x]")
    doc = yaml.safe_load(repository_file(login))
    assert doc["repositories"] == [
        {"name": ALIAS, "url": login.url, "username": "user", "password": login.password}
    ]


def test_the_registry_file_holds_the_registrys_basic_credentials() -> None:
    login = RepositoryLogin("oci://registry.example:5000/charts", "user", "t0:ken")
    doc = json.loads(registry_file(login))
    assert doc == {"auths": {"registry.example:5000": {"auth": "dXNlcjp0MDprZW4="}}}
    assert base64.b64decode(doc["auths"]["registry.example:5000"]["auth"]) == b"user:t0:ken"
