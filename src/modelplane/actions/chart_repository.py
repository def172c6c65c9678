"""A chart repository's credentials, taken out of its URL so that helm's command line has none.

A mirror is often named ``https://user:token@mirror/charts``. Given to helm
as ``--repo``, that URL is on helm's command line, which every local user
reads in /proc, and in helm's errors. ``helm install`` takes credentials
only as ``--username``/``--password`` (the command line again); what keeps
them off it is helm's repository file: an entry with the URL, user and
password, in a file of the run's own (0600, in a private directory), whose
index ``helm repo update`` fetches before the chart is named as
``<alias>/<chart>``. helm then sends the credentials itself, to the
repository's host only, as it would from the URL.

An ``oci://user:password@registry/path`` reference, which helm does not
take at all (its userinfo is no part of an OCI reference), goes the same
way: the credentials in a registry file of the run's own
(``--registry-config``, Docker's config.json format), the reference
without them.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

from modelplane.wire import for_go

# What the repository is called in a run's repository file; helm says it in
# errors about the chart ("not found in chart-repository index").
ALIAS = "chart-repository"


@dataclass(frozen=True)
class RepositoryLogin:
    url: str  # without the userinfo
    username: str
    password: str

    @property
    def oci(self) -> bool:
        return self.url.startswith("oci://")


def repository_login(repository: str) -> RepositoryLogin | None:
    """The user and password of a repository URL (http, https, oci), and the URL without them.

    None for a URL without both: helm's repository file sends credentials
    only when it has a user and a password, so a URL with a user alone (a
    token as the user) goes to helm as it is, and its errors are scrubbed.
    """
    try:
        parsed = urlsplit(repository)
    except ValueError:
        return None
    if parsed.scheme not in ("http", "https", "oci") or "@" not in parsed.netloc:
        return None
    userinfo, _, host = parsed.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    if not username or not password:
        return None
    # Decoded, as Go decodes a URL's userinfo before it sends it.
    return RepositoryLogin(
        urlunsplit(parsed._replace(netloc=host)), unquote(username), unquote(password)
    )


def repository_file(login: RepositoryLogin) -> str:
    """helm's repository file (``--repository-config``) with the one repository of ``login``."""
    entry = {
        "name": ALIAS,
        "url": login.url,
        "username": login.username,
        "password": login.password,
    }
    return for_go({"apiVersion": "", "repositories": [entry]})


def registry_file(login: RepositoryLogin) -> str:
    """helm's registry file (``--registry-config``) with the credentials of ``login``'s registry."""
    registry = urlsplit(login.url).netloc
    auth = base64.b64encode(f"{login.username}:{login.password}".encode()).decode()
    return json.dumps({"auths": {registry: {"auth": auth}}})
