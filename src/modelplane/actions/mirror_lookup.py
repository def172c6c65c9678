"""A set of images looked up in the mirror, with the pull Secrets' credentials a target holds.

Shared by the operator's preflights (operator.mirror_preflight) and
``modelplane diff``: the configs of the ``--image-pull-secret`` Secrets are
read from the target in the namespaces whose pods would pull the images,
and the first one naming the mirror's host gives the credentials
(``actions.registry.credentials_for``, as the kubelet picks them). A Secret
that is not there (or not readable) gives nothing: the lookup goes without
credentials, and a mirror that wants some says so. Only the configs are
kept, for this lookup; never logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Secret

from modelplane.actions.registry import Credentials, Registry, config_of, credentials_for
from modelplane.plan.mirror_images import Lookup


async def look_up(
    registry: Registry,
    images: Sequence[str],
    client: AsyncClient,
    secrets: Sequence[str],
    namespaces: Sequence[str],
) -> list[Lookup]:
    """What the mirror says of each image, asked with the Secrets' credentials."""
    configs = await pull_configs(client, secrets, namespaces)
    return await registry.lookup_all(images, lambda r, n: first_credentials(configs, r, n))


async def pull_configs(
    client: AsyncClient, secrets: Sequence[str], namespaces: Sequence[str]
) -> list[dict[str, Any]]:
    """The Secrets' configs, namespace by namespace, those there and readable."""
    out: list[dict[str, Any]] = []
    for namespace in namespaces:
        for name in secrets:
            config = await _read_config(client, name, namespace)
            if config is not None:
                out.append(config)
    return out


def first_credentials(
    configs: Sequence[dict[str, Any]], registry: str, name: str
) -> Credentials | None:
    for config in configs:
        found = credentials_for(config, registry, name)
        if found is not None:
            return found
    return None


async def _read_config(client: AsyncClient, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        secret = await client.get(Secret, name, namespace=namespace)
    except ApiError as err:
        if err.status.code not in (403, 404):
            raise
        return None
    return config_of(secret.data or {})
