"""The operator's own cluster: one kubeconfig for both of its clients, and what kopf watches there.

The hub's kubeconfig is read once, by lightkube, and kopf logs in with the
very same cluster and user: nothing is passed through the process
environment, so the two clients cannot end up on different hubs.

Whether the hub serves ServingStacks is the operator's own startup check
(kopf scans the hub's APIs at its start too, but keeps what it found in an
object it does not export); what ``/readyz`` says follows from it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp
import kopf
from lightkube import AsyncClient, KubeConfig
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

from modelplane.api.crd import servingstack_crd
from modelplane.plan.crds import CrdAction, CrdChange, crd_change
from modelplane.wire import FIELD_MANAGER, stamp

# kopf's rule for the namespace names it can watch without listing
# namespaces (scanning is off, see process.settings): a name with any of
# these is a pattern, and matches nothing.
_PATTERN_MARKS = "!*?,"
# kopf's connections to the hub for its requests, at most, at once, besides
# one for each of its watches. kopf's own session has no limit (an aiohttp
# connector with ``limit=0``, kopf 1.45): an operator that starts over a
# shard's stacks patches each at once, and so opened a TLS connection to
# the hub for every stack, some 0.34 MiB each (2,500 stacks: over 1 GiB
# within two minutes of the start, issue 42). The rest of kopf's requests
# wait their turn in the connector: the hub answers a patch in milliseconds.
HUB_CONNECTIONS = 20
# Between tries of the startup check when the hub does not answer it; kopf
# holds everything else back meanwhile and /readyz says it is starting.
CHECK_RETRY_SECONDS = 5.0


def load_config(path: Path | None) -> SingleConfig:
    """The hub's cluster and user: ``path``, else in-cluster, $KUBECONFIG or ~/.kube/config."""
    config = KubeConfig.from_file(path) if path is not None else KubeConfig.from_env()
    single = config.get()
    assert single is not None, "lightkube raises ConfigError rather than give no context"
    return single


def _read(path: Any) -> str:
    return Path(path).read_text().strip()


def connection_info(config: SingleConfig, *, trust_env: bool = False) -> kopf.ConnectionInfo:
    """What kopf needs to log in to the hub ``config`` names, as lightkube reads it.

    Relative file names are taken from the kubeconfig's own directory, as
    kubectl and lightkube take them. A token file is read again on every
    login, so a rotated ServiceAccount token is picked up when kopf asks
    anew after a 401. Exec plugins are lightkube's alone: kopf gets no token
    from them.
    """
    cluster, user = config.cluster, config.user
    token = None
    if user is not None:
        if user.token_file:
            token = _read(config.abs_file(user.token_file))
        elif user.token:
            token = user.token
        elif user.auth_provider:
            token = (user.auth_provider.get("config") or {}).get("access-token")

    def path(name: str | None) -> str | None:
        return str(config.abs_file(name)) if name else None

    return kopf.ConnectionInfo(
        server=cluster.server,
        ca_path=path(cluster.certificate_auth),
        ca_data=cluster.certificate_auth_data,
        insecure=cluster.insecure,
        certificate_path=path(user.client_cert) if user else None,
        certificate_data=user.client_cert_data if user else None,
        private_key_path=path(user.client_key) if user else None,
        private_key_data=user.client_key_data if user else None,
        username=user.username if user else None,
        password=user.password if user else None,
        token=token,
        default_namespace=config.context.namespace,
        trust_env=trust_env,
    )


def kopf_watches(namespaces: Iterable[str], clusterwide: bool) -> int:
    """How many watches kopf keeps open on the hub: one a namespace, or one in all.

    The ServingStacks are kopf's only resource, and the operator runs it
    standalone (no peering objects to watch).
    """
    return 1 if clusterwide else len(list(namespaces))


def bounded_session(
    info: kopf.ConnectionInfo, *, watches: int, connections: int = HUB_CONNECTIONS
) -> kopf.AiohttpSession:
    """kopf's login ``info`` as a session of its own, its connections to the hub bounded.

    At most ``connections`` for kopf's requests and one for each of its
    ``watches`` (``kopf_watches``): a watch holds its connection for as long
    as it runs, and more watches than the bound would leave no connection
    for a patch. What kopf would build of ``info`` (its TLS context, its
    Authorization header, its proxy), with the connector bounded:
    ``kopf.AiohttpSession`` is kopf's way to give it a session, which kopf
    closes when it logs in anew. Called in the event loop (aiohttp binds a
    session to the running loop).
    """
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections + watches, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        proxy=info.proxy_url,
        trust_env=info.trust_env,
    )
    return kopf.AiohttpSession(
        server=info.server,
        default_namespace=info.default_namespace,
        aiohttp_session=session,
    )


class CrdRefused(Exception):
    """The hub's ServingStack CRD cannot be brought up to date as it stands."""


async def ensure_servingstack_crd(hub: AsyncClient) -> CrdChange:
    """Bring the hub's ServingStack CRD to this operator's, with server-side apply.

    Helm installs a chart's ``crds/`` once and never upgrades them, so after
    ``helm upgrade`` of the operator the hub would keep serving the old
    schema and prune the new status fields as they are written. The CRD is
    never deleted: that would delete every ServingStack with it. A CRD that
    already carries this operator's digest costs one GET and no write.
    """
    desired = stamp(servingstack_crd())
    name = desired["metadata"]["name"]
    try:
        live: dict[str, Any] | None = (await hub.get(CustomResourceDefinition, name)).to_dict()
    except ApiError as err:
        if err.status.code != 404:
            raise
        live = None
    change = crd_change(desired, live)
    if change.action is CrdAction.REFUSE:
        raise CrdRefused(change.message)
    if change.writes:
        body = cast(CustomResourceDefinition, CustomResourceDefinition.from_dict(desired))
        await hub.apply(
            body,
            field_manager=FIELD_MANAGER,
            # The chart's crds/ left the fields to Helm's own manager (or
            # kubectl's, after `modelplane crds | kubectl apply`): ours now.
            force=True,
        )
    return change


def exact_namespaces(namespaces: Iterable[str]) -> list[str]:
    """The names among ``namespaces`` kopf watches as given: those that are no pattern."""
    return [n for n in namespaces if not any(mark in n for mark in _PATTERN_MARKS)]


@dataclass
class Watched:
    """What kopf watches on the hub: the namespaces it was given, and whether the CRD is served."""

    # None: every namespace.
    namespaces: list[str] | None
    # None until the startup check has answered.
    served: bool | None = None
    # Why the hub's CRD cannot be brought up to date, while it cannot.
    crd_problem: str | None = None

    @classmethod
    def of(cls, namespaces: list[str], clusterwide: bool) -> Watched:
        return cls(None if clusterwide else exact_namespaces(namespaces))

    @property
    def any_namespace(self) -> bool:
        return self.namespaces is None or bool(self.namespaces)

    async def check(self, hub: AsyncClient, resource: Any) -> None:
        """Ask the hub for one object of ``resource`` where kopf watches: 404 is "not served".

        Any other refusal (a 403 from RBAC) still says the resource exists;
        kopf's own watch then reports what is wrong with it.
        """
        where = self.namespaces[0] if self.namespaces else "*"
        try:
            async for _ in hub.list(resource, namespace=where, chunk_size=1):
                break
        except ApiError as err:
            if err.status.code == 404:
                self.served = False
                return
            if err.status.code != 403:
                raise
        self.served = True
