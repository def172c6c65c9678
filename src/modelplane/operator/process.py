"""The operator's process: kopf's settings, the start, the leader's Lease, readiness."""

from __future__ import annotations

import asyncio
import functools
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import kopf
from aiohttp import web
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from modelplane.actions.helm import Helm, TargetHelm
from modelplane.api.models import API_GROUP, PLURAL
from modelplane.kube.answers import describe_error
from modelplane.operator import collector, heap, kopf_bodies, loop_lag, metrics
from modelplane.operator.handlers import FINALIZER, QuietTeardownRetries, register
from modelplane.operator.hub import (
    CHECK_RETRY_SECONDS,
    CrdRefused,
    Watched,
    bounded_session,
    connection_info,
    ensure_servingstack_crd,
    kopf_watches,
    load_config,
)
from modelplane.operator.leader import LEADER, Elector, exit_now
from modelplane.operator.metrics_auth import HubReviewer, RememberingReviewer, server_context
from modelplane.operator.options import OperatorOptions
from modelplane.operator.runtime import Runtime, ServingStackResource

log = logging.getLogger("modelplane.operator")


def settings(selector: str | None = None) -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    if selector:
        # Server-side: the hub sends this shard only its own stacks, so the
        # daemons, the event handler and teardown never see another's.
        s.watching.label_selectors[API_GROUP, PLURAL] = selector
    s.persistence.finalizer = FINALIZER
    s.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="modelplane.ai")
    s.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="modelplane.ai", key="last-handled-configuration"
    )
    # kopf would post an event for every handler run (its log lines); ours
    # are explicit, through kopf.event.
    s.posting.loggers = False
    s.posting.level = logging.WARNING
    s.watching.server_timeout = 300
    # A stopped daemon closes its target watches and connections, which
    # takes real I/O, not the few zero-time cycles kopf waits by default.
    # Had kopf not seen it exit, it would keep the finalizer, sleep out the
    # daemon's cancellation timeout, and run the deletion handlers once more
    # after they had succeeded: a teardown that re-claims a target it just
    # released, in a namespace it is deleting.
    s.background.instant_exit_timeout = 5.0
    # kopf would otherwise watch every CRD and, when namespaced, list every
    # namespace on the hub: cluster-wide reads a namespaced install must not
    # need. The ServingStack CRD is installed before the operator (the chart's
    # crds/, or `modelplane crds` first), and the named namespaces are taken
    # as they are. See kopf's reactor/observation.py on scanning.
    s.scanning.disabled = True
    return s


async def run(options: OperatorOptions) -> None:
    """Run the operator until interrupted."""
    # Read once: the hub client and kopf's login both use this one.
    config = load_config(options.hub_kubeconfig)
    hub = AsyncClient(config)
    with tempfile.TemporaryDirectory(prefix="modelplane-helm-") as home:
        helm = Helm.find(Path(home), options.helm_timeout_seconds)
        rt = Runtime(
            options=options, hub=hub, helm=TargetHelm.guarding(helm, options.deny_target_cidrs)
        )
        rt.expose()
        quiet_teardown = QuietTeardownRetries()
        logging.getLogger("kopf.objects").addFilter(quiet_teardown)
        started = asyncio.Event()
        clusterwide = options.all_namespaces or not options.namespaces
        watched = Watched.of(options.namespaces, clusterwide)
        elector = (
            Elector(
                hub,
                options.leader_election,
                # helm runs in process groups of its own: an exit alone
                # would leave them acting for a replica that stepped down.
                step_down=functools.partial(exit_now, rt.helm.kill_running),
            )
            if options.leader_election is not None
            else None
        )
        if elector is None:
            # The only replica reconciles: an alert on no leader must not fire for it.
            LEADER.set(1)
        servers = await _serve(
            options, hub, functools.partial(_readiness, started, watched, elector)
        )
        if elector is not None:
            # A standby starts nothing of kopf: no watch, no finalizer, no write.
            await elector.acquire()
        holding = asyncio.create_task(elector.hold()) if elector is not None else None
        registry = kopf.OperatorRegistry()
        register(registry, rt)

        @kopf.on.login(registry=registry)
        async def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.AiohttpSession:
            info = connection_info(config, trust_env=settings.networking.trust_env)
            return bounded_session(info, watches=kopf_watches(options.namespaces, clusterwide))

        @kopf.on.startup(registry=registry)
        async def check_hub(**_: Any) -> None:
            # kopf raises its ready flag once this has passed. Only a leader
            # gets here: a standby writes nothing, the CRD included.
            try:
                if options.manage_crd:
                    change = await ensure_servingstack_crd(hub)
                    watched.crd_problem = None
                    if change.writes:
                        log.info("the hub's ServingStack CRD: %s", change.message)
                await watched.check(hub, ServingStackResource)
            except CrdRefused as err:
                watched.crd_problem = str(err)
                raise kopf.TemporaryError(str(err), delay=CHECK_RETRY_SECONDS) from err
            except (ApiError, httpx2.HTTPError) as err:
                raise kopf.TemporaryError(describe_error(err), delay=CHECK_RETRY_SECONDS) from err

        # The stacks' bodies kopf keeps, without what nobody reads of them.
        kopf_bodies.install()
        giving_back = asyncio.create_task(heap.keep_giving_back(heap.glibc_trim()))
        collecting = asyncio.create_task(
            collector.keep_collections_short(options.gc_full_scan_seconds)
        )
        measuring = asyncio.create_task(loop_lag.keep_measuring())
        try:
            await kopf.operator(
                registry=registry,
                settings=settings(options.selector),
                standalone=True,
                clusterwide=clusterwide,
                namespaces=options.namespaces,
                ready_flag=started,
            )
        finally:
            # kopf has cancelled every daemon, and each helm run with it; a
            # run kopf gave up waiting for must not outlive the operator.
            rt.helm.kill_running()
            giving_back.cancel()
            collecting.cancel()
            measuring.cancel()
            if holding is not None and elector is not None:
                # kopf has stopped every daemon and handler: nothing acts for
                # us any more, so the Lease can go to a standby at once.
                holding.cancel()
                await elector.release()
            for server in servers:
                await server.cleanup()
            await hub.close()
            logging.getLogger("kopf.objects").removeFilter(quiet_teardown)


async def _serve(
    options: OperatorOptions, hub: AsyncClient, ready: Callable[[], metrics.Readiness]
) -> list[web.AppRunner]:
    """The probes' and the metrics' servers, each when its port is given."""
    servers = []
    if options.health_port is not None:
        servers.append(
            await metrics.serve_probes(options.metrics_address, options.health_port, ready)
        )
    if options.metrics_port is not None:
        servers.append(
            await metrics.serve_metrics(
                options.metrics_address,
                options.metrics_port,
                RememberingReviewer(HubReviewer(hub)),
                server_context(options.metrics_cert_dir),
            )
        )
    return servers


def _readiness(
    started: asyncio.Event, watched: Watched, elector: Elector | None
) -> metrics.Readiness:
    """Ready once kopf runs and watches ServingStacks on the hub, or as a sound standby.

    A standby has started nothing of kopf, so it is judged by its Lease: it
    is ready while it can read the Lease and finds it held by another
    replica, which is all it needs to take over.
    """
    if elector is not None and not elector.leading:
        holder = elector.standing_by_for
        if holder is not None:
            return metrics.Readiness(
                ready=True, detail=f"standby: the Lease {elector.lease} is held by {holder}"
            )
        if elector.error is not None:
            return metrics.Readiness(
                ready=False, detail=f"the Lease {elector.lease} cannot be read: {elector.error}"
            )
        return metrics.Readiness(ready=False, detail="the operator is starting")
    if watched.crd_problem is not None:
        return metrics.Readiness(ready=False, detail=watched.crd_problem)
    if not started.is_set():
        return metrics.Readiness(ready=False, detail="the operator is starting")
    if not watched.served:
        return metrics.Readiness(
            ready=False,
            detail=f"{PLURAL}.{API_GROUP} is not served by the hub (install the CRD, then restart)",
        )
    if not watched.any_namespace:
        return metrics.Readiness(ready=False, detail="no namespace to watch yet")
    return metrics.READY
