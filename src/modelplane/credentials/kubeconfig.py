"""Kubeconfigs read from Secrets are untrusted input.

A kubeconfig can tell a client to run a program (``exec``), call an auth
provider plugin, or read files from the operator's disk (certificate, key or
token paths). Any of those would let whoever writes a Secret on the hub run
code or read files as the operator, so they are refused unless the operator
was started with ``--allow-unsafe-kubeconfig`` (the same stance Flux takes
with ``--insecure-kubeconfig-exec``). A ``proxy-url`` is refused with them:
it would send requests through a proxy of the kubeconfig's choosing, to an
address no check saw (helm's is replaced by the operator's own proxy in any
case, see kube/proxy.py).
Error messages name the offending field, never its value.

With a cloud identity entry in ``spec.secrets`` the kubeconfig gives only the
server and CA: its users are emptied before vetting (``without_credentials``),
so a GKE or EKS kubeconfig whose user runs an exec plugin is fine, and its
credentials are never used, not even as a fallback.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from lightkube.config.kubeconfig import KubeConfig, SingleConfig

from modelplane.untrusted import UntrustedInputError, load_yaml

_FILE_FIELDS = {
    "cluster": ("certificate-authority",),
    "user": ("client-certificate", "client-key", "tokenFile", "token-file"),
}
_PLUGIN_FIELDS = ("exec", "auth-provider")


class KubeconfigError(Exception):
    """The kubeconfig cannot be used; the message is safe to show and log."""


def parse_kubeconfig(data: bytes | str, *, allow_unsafe: bool = False) -> SingleConfig:
    """Parse and vet a kubeconfig, returning the config of its current context."""
    return vet_kubeconfig(load_kubeconfig(data), allow_unsafe=allow_unsafe)


def load_kubeconfig(data: bytes | str) -> dict[str, Any]:
    """The kubeconfig's YAML, as a mapping; not yet vetted (``vet_kubeconfig``)."""
    try:
        doc = load_yaml(data)
    except UntrustedInputError as err:
        raise KubeconfigError("the kubeconfig is not valid YAML") from err
    if not isinstance(doc, dict):
        raise KubeconfigError("the kubeconfig is not a YAML mapping")
    return doc


def vet_kubeconfig(doc: dict[str, Any], *, allow_unsafe: bool = False) -> SingleConfig:
    """Vet a parsed kubeconfig (``doc`` is left as it is); the config of its current context."""
    if not allow_unsafe:
        _refuse_unsafe(doc)
    _check_structure(doc)
    try:
        config = KubeConfig.from_dict(doc).get()
    except Exception as err:  # lightkube raises several types for a bad document
        raise KubeconfigError(f"the kubeconfig cannot be used: {type(err).__name__}") from err
    if config is None:
        raise KubeconfigError("the kubeconfig has no current context")
    return config


def without_credentials(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of the kubeconfig ``doc`` with every user emptied: what is left is servers and CAs.

    An entry of ``users`` that is not a mapping is kept as it is, for
    ``vet_kubeconfig`` to judge.
    """
    users = doc.get("users")
    if not isinstance(users, list):
        return doc
    emptied = [
        {"name": entry.get("name"), "user": {}} if isinstance(entry, dict) else entry
        for entry in users
    ]
    return {**doc, "users": emptied}


def _named(doc: dict[str, Any], section: str, inner: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and isinstance(entry.get(inner), dict):
            out.append((str(entry.get("name", "?")), entry[inner]))
    return out


def _refuse_unsafe(doc: dict[str, Any]) -> None:
    for name, user in _named(doc, "users", "user"):
        for field in _PLUGIN_FIELDS:
            if field in user:
                raise KubeconfigError(
                    f"user {name!r} uses {field!r}, which would run a program or plugin in the "
                    "operator; use an embedded token or client certificate, a cloud identity "
                    "entry in spec.secrets (GoogleApplicationCredentials, ...), or start the "
                    "operator with --allow-unsafe-kubeconfig"
                )
        for field in _FILE_FIELDS["user"]:
            if field in user:
                raise KubeconfigError(
                    f"user {name!r} sets {field!r}, a path on the operator's disk; embed the "
                    "data instead (for example client-certificate-data or token)"
                )
    for name, cluster in _named(doc, "clusters", "cluster"):
        for field in _FILE_FIELDS["cluster"]:
            if field in cluster:
                raise KubeconfigError(
                    f"cluster {name!r} sets {field!r}, a path on the operator's disk; embed "
                    "it as certificate-authority-data instead"
                )
        if "proxy-url" in cluster:
            raise KubeconfigError(
                f"cluster {name!r} sets 'proxy-url', which would send the operator's requests "
                "through a proxy of the kubeconfig's choosing; remove it, or start the "
                "operator with --allow-unsafe-kubeconfig"
            )


def _check_structure(doc: dict[str, Any]) -> None:
    """Name what is missing, rather than let the client fail on a KeyError."""
    current = doc.get("current-context")
    if not current:
        raise KubeconfigError("the kubeconfig sets no current-context")
    contexts = dict(_named(doc, "contexts", "context"))
    if current not in contexts:
        raise KubeconfigError(f"the kubeconfig has no context {current!r} (its current-context)")
    context = contexts[current]
    for field, section, inner in (("cluster", "clusters", "cluster"), ("user", "users", "user")):
        name = context.get(field)
        if name is None or name not in dict(_named(doc, section, inner)):
            raise KubeconfigError(
                f"context {current!r} names {field} {name!r}, which the kubeconfig does not have"
            )
    cluster = dict(_named(doc, "clusters", "cluster"))[context["cluster"]]
    server = cluster.get("server")
    if not server:
        raise KubeconfigError(f"cluster {context['cluster']!r} has no server")
    try:
        parts = urlsplit(str(server))
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise KubeconfigError(
            f"cluster {context['cluster']!r} has a server that is not an https:// (or "
            "http://) URL with a host and an optional port"
        )
