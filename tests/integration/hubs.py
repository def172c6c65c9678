"""Helpers for tests that drive ServingStacks on a hub against their own targets.

A hub client with the ServingStack CRD served, private target API servers,
the kubeconfig Secret a stack names, a ServingStack body, and ``Harness``
(one hub namespace, one target, one operator process). conftest.py turns the
first two into fixtures; test modules import the rest from here, never from
each other.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import signal
import socket
import subprocess
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import yaml
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap, Namespace, Secret
from lightkube.types import PatchType
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.substrate import Substrate, run_operator
from tests.testenv import TestEnv, find_binaries, helm_environ
from tests.waiting import gone, wait_for

from modelplane.api.crd import servingstack_crd
from modelplane.api.models import API_GROUP, API_VERSION, KIND, PLURAL

SS = create_namespaced_resource(API_GROUP, API_VERSION, KIND, PLURAL)
TARGET_SECRET = "target-kubeconfig"
KUBECONFIG_KEY = "kubeconfig"


def namespace_for(prefix: str, test_name: str) -> str:
    """A namespace of one test's own: unique per test name, valid, at most 63 characters.

    Test names carry ``[param]`` ids, which a namespace name may not; the
    digest of the whole name keeps names apart that the slug cuts alike.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower().removeprefix("test_"))
    digest = hashlib.sha256(test_name.encode()).hexdigest()[:6]
    name = f"{prefix}-{slug[:45].strip('-')}-{digest}"
    assert len(name) <= 63, f"namespace prefix {prefix!r} too long: {name}"
    return name


def requests_by_resource(env: TestEnv, verbs: Collection[str]) -> dict[str, float]:
    """Requests with one of ``verbs`` the API server served so far, per resource, one scrape.

    Counted from its ``apiserver_request_total``; only requests for a
    resource, so the scrapes of ``/metrics`` themselves are not counted.
    """
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(env.metrics_text()):
        for sample in family.samples:
            resource = sample.labels.get("resource")
            if (
                sample.name == "apiserver_request_total"
                and sample.labels.get("verb") in verbs
                and resource
            ):
                out[resource] = out.get(resource, 0.0) + sample.value
    return out


def client_requests_by_resource(env: TestEnv, verbs: Collection[str]) -> dict[str, float]:
    """As ``requests_by_resource``, but for Leases only the requests of clients.

    The API server's reads of its own identity Lease are in its metrics too;
    the audit log says who read what.
    """
    out = requests_by_resource(env, verbs)
    out.pop("leases", None)
    leases = env.client_lease_requests(verbs)
    if leases:
        out["leases"] = leases
    return out


@dataclass(frozen=True)
class HarnessOptions:
    """How the shared ``harness`` fixture sets up a module's tests (a module's ``HARNESS``).

    ``prefix`` keeps one module's namespaces apart from another's on the
    session's hub; ``kubeconfig_secret`` puts the target's kubeconfig Secret
    in place first, for modules whose tests all reach the target.
    """

    prefix: str = "t"
    kubeconfig_secret: bool = False


def client_for(env: TestEnv, field_manager: str = "test") -> Client:
    return Client(KubeConfig.from_dict(env.kubeconfig), field_manager=field_manager)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape_metrics(port: int, token: str, timeout: float = 5.0) -> httpx2.Response:
    """The operator's ``/metrics`` read as a scraper the hub allows reads it.

    Over TLS to the certificate the operator made for itself (so not
    verified, as the chart's ServiceMonitor by default), with a bearer token
    the operator reviews with the hub (the hub's admin token, for most tests).
    """
    with httpx2.Client(trust_env=False, verify=False, timeout=timeout) as http:
        return http.get(
            f"https://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"}
        )


def service_account_token(hub_env: TestEnv, namespace: str, service_account: str) -> str:
    """A fresh token of ``service_account``, as the kubelet would mount one into a pod."""
    with hub_env.http_client() as http:
        response = http.post(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            json={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )
    response.raise_for_status()
    return str(response.json()["status"]["token"])


@contextlib.contextmanager
def private_env(directory: Path) -> Iterator[TestEnv]:
    """A fresh API server (with its own etcd) under ``directory``, stopped on exit.

    For tests whose target must start empty: claims, finalizers and
    terminating namespaces left behind on a shared one would leak into the
    next test (a bare API server has no namespace controller).
    """
    env = TestEnv(directory)
    try:
        env.start()
        yield env
    finally:
        env.stop()


def crd_established(client: Client, name: str) -> bool:
    status = client.get(CustomResourceDefinition, name).status
    conditions = (status.conditions if status else None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def install_servingstack_crd(client: Client, env: TestEnv, *, deadline: float) -> None:
    """Apply the generated ServingStack CRD and wait until its resource is served."""
    body = servingstack_crd()
    name = body["metadata"]["name"]
    client.apply(CustomResourceDefinition.from_dict(body), force=True)
    wait_for(
        "the ServingStack CRD established",
        lambda: crd_established(client, name),
        deadline=deadline,
    )

    # Established is reported before the new resource is served everywhere:
    # until it is, the LIST answers 404 (an ApiError: "not yet" to wait_for).
    def served() -> bool:
        next(iter(client.list(SS, namespace="*", chunk_size=1)), None)
        return True

    wait_for("ServingStacks served", served, deadline=deadline)


def ensure_namespace(hub: Client, name: str) -> None:
    hub.apply(Namespace.from_dict({"metadata": {"name": name}}), field_manager="test")


def put_secret(hub: Client, namespace: str, name: str, data: Mapping[str, str]) -> None:
    hub.apply(
        Secret.from_dict(
            {
                "metadata": {"name": name, "namespace": namespace},
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
            }
        ),
        field_manager="test",
        force=True,
    )


def put_kubeconfig(
    hub: Client,
    namespace: str,
    kubeconfig: Mapping[str, Any],
    name: str = TARGET_SECRET,
    key: str = KUBECONFIG_KEY,
) -> None:
    """The Secret a ServingStack's Kubeconfig reference names, holding ``kubeconfig``."""
    put_secret(hub, namespace, name, {key: yaml.safe_dump(dict(kubeconfig))})


def with_server(kubeconfig: Mapping[str, Any], server: str) -> dict[str, Any]:
    """``kubeconfig`` with every cluster pointed at ``server`` (credentials kept)."""
    out = dict(kubeconfig)
    out["clusters"] = [
        {**c, "cluster": {**c["cluster"], "server": server}} for c in kubeconfig["clusters"]
    ]
    return out


def drop_empty_lists(node: Any) -> Any:
    """``node`` without empty lists: the API server drops them from what it stores."""
    if isinstance(node, dict):
        return {k: drop_empty_lists(v) for k, v in node.items() if v != []}
    if isinstance(node, list):
        return [drop_empty_lists(v) for v in node]
    return node


def stack_body(
    namespace: str,
    name: str = "stack",
    spec: Mapping[str, Any] | None = None,
    *,
    secret: str = TARGET_SECRET,
    key: str = KUBECONFIG_KEY,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ServingStack reaching its target through the kubeconfig in ``secret``."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "secrets": [{"type": "Kubeconfig", "name": secret, "key": key}],
            **(spec or {}),
        },
    }


def forget_release_records(h: Harness) -> None:
    """Clear the stack's ``status.releases``, as for a stack an older operator managed.

    Without the hub's record a target's newest revision is taken as found:
    the tests of the bounds that hold then start here, the operator stopped.
    """
    h.hub.patch(
        SS.Status,
        "stack",
        {"status": {"releases": None}},
        namespace=h.ns,
        patch_type=PatchType.MERGE,
    )


def stack_gone(hub: Client, namespace: str, name: str = "stack") -> bool:
    """Whether the ServingStack is gone from the hub (its teardown done, its finalizer off)."""
    return gone(hub, SS, name, namespace)


def put_stack(hub: Client, body: Mapping[str, Any]) -> None:
    hub.apply(SS.from_dict(dict(body)), field_manager="test", force=True)


class Harness:
    """One namespace on the hub, one target, one operator process."""

    def __init__(
        self,
        hub: Client,
        hub_env: TestEnv,
        target: TestEnv,
        substrate: Substrate,
        tmp: Path,
        namespace: str,
    ) -> None:
        self.hub, self.hub_env, self.target_env = hub, hub_env, target
        self.target = client_for(target)
        self.substrate, self.tmp, self.ns = substrate, tmp, namespace
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port: int | None = None  # /metrics, over HTTPS
        self.health_port: int | None = None  # /healthz and /readyz, in HTTP
        self.log = tmp / "operator.log"
        ensure_namespace(hub, namespace)

    def put_secret(self, data: dict[str, str], name: str = TARGET_SECRET) -> None:
        put_secret(self.hub, self.ns, name, data)

    def kubeconfig_text(self) -> str:
        return yaml.safe_dump(self.target_env.kubeconfig)

    def create(self, spec: dict[str, Any], name: str = "stack") -> None:
        put_stack(self.hub, stack_body(self.ns, name, spec))

    def start(self, *extra: str) -> None:
        self.metrics_port, self.health_port = free_port(), free_port()
        self.proc = run_operator(
            self.hub_env.kubeconfig_path,
            self.substrate,
            self.ns,
            self.log,
            "--metrics-port",
            str(self.metrics_port),
            "--health-port",
            str(self.health_port),
            *extra,
        )

    def scrape(self, timeout: float = 5.0) -> httpx2.Response:
        """The running operator's /metrics, read with the hub's admin token."""
        assert self.metrics_port is not None, "the operator is not running"
        return scrape_metrics(self.metrics_port, self.hub_env.token, timeout)

    def probe(self, path: str, timeout: float = 5.0) -> httpx2.Response:
        """The running operator's /healthz or /readyz."""
        assert self.health_port is not None, "the operator is not running"
        with httpx2.Client(trust_env=False, timeout=timeout) as http:
            return http.get(f"http://127.0.0.1:{self.health_port}{path}")

    def operator_counter(self, name: str) -> float:
        """A counter of the running operator's own metrics, summed over its labels."""
        response = self.scrape()
        response.raise_for_status()
        return sum(
            sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
            if sample.name == name
        )

    def reconciles(self) -> int:
        return int(self.operator_counter("modelplane_reconciles_total"))

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None
            self.metrics_port = self.health_port = None

    def tear_down(self, deadline: float = 300) -> None:
        """Delete the stack, if there is one, and wait for its teardown to be over.

        For a target other modules share: the operator (which must be
        running) uninstalls the releases and gives the claim back before the
        finalizer comes off, and the namespaces it deleted are waited out, so
        the next module finds neither their objects nor a namespace that
        refuses new ones.
        """
        try:
            self.hub.delete(SS, "stack", namespace=self.ns)
        except ApiError as err:
            if err.status.code != 404:
                raise
        wait_for(
            "the ServingStack torn down", lambda: stack_gone(self.hub, self.ns), deadline=deadline
        )
        wait_for(
            "the target's deleted namespaces gone",
            lambda: (
                not [
                    n
                    for n in self.target.list(Namespace)
                    if n.status and n.status.phase == "Terminating"
                ]
            ),
            deadline=deadline,
        )

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None
            self.metrics_port = self.health_port = None

    def status(self, name: str = "stack") -> dict[str, Any]:
        obj = self.hub.get(SS, name, namespace=self.ns)
        return dict(obj.to_dict().get("status") or {})

    def condition(self, type_: str, name: str = "stack") -> dict[str, Any]:
        for c in self.status(name).get("conditions", []):
            if c["type"] == type_:
                return dict(c)
        return {}

    def wait_condition(
        self,
        type_: str,
        status: str,
        reason: str | None = None,
        *,
        deadline: float,
        name: str = "stack",
        generation: int | None = None,
    ) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            c = self.condition(type_, name)
            ok = c.get("status") == status and (reason is None or c.get("reason") == reason)
            ok = ok and (generation is None or c.get("observedGeneration") == generation)
            return c if ok else None

        try:
            return dict(wait_for(f"{type_}={status} {reason or ''}", check, deadline=deadline))
        except AssertionError as err:
            raise AssertionError(
                f"{err}\nstatus: {self.status(name)}\nlog tail:\n{self.log.read_text()[-3000:]}"
            ) from None

    def helm_releases(self) -> dict[str, dict[str, Any]]:
        out = self.substrate_helm("list", "--all-namespaces", "-a", "-o", "json")
        return {r["name"]: r for r in json.loads(out)}

    def substrate_helm(self, *args: str) -> str:
        proc = subprocess.run(
            [
                str(find_binaries()["helm"]),
                *args,
                "--kubeconfig",
                str(self.target_env.kubeconfig_path),
            ],
            env=helm_environ(self.tmp / "helm-home"),
            capture_output=True,
            text=True,
            check=True,
        )
        return proc.stdout

    def release_values(self, name: str, namespace: str) -> dict[str, Any]:
        cm = self.target.get(ConfigMap, f"{name}-values", namespace=namespace)
        return dict(json.loads((cm.data or {})["values.json"]))


@dataclass(frozen=True)
class Resyncs:
    """What some resyncs cost, from the API servers' own request counters.

    Each mapping holds only what grew: reads (GET and LIST) by resource,
    writes by (verb, resource). ``count`` is the reconciles done meanwhile,
    at least as many as were asked for.
    """

    count: int
    target_reads: dict[str, float]
    hub_reads: dict[str, float]
    target_writes: dict[tuple[str, str], float]
    hub_writes: dict[tuple[str, str], float]


def _grown(before: Mapping[Any, float], after: Mapping[Any, float]) -> dict[Any, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}


def measure_resyncs(h: Harness, count: int = 5, *, settle: int = 3) -> Resyncs:
    """Let ``settle`` reconciles pass, then count what the next ``count`` cost.

    The settling ones follow the stack's own last writes: they are not what
    a no-op resync costs.
    """
    settled = h.reconciles() + settle
    wait_for(f"{settle} resyncs to settle", lambda: h.reconciles() >= settled, deadline=60)

    def scrape() -> tuple[dict[Any, float], ...]:
        reads = ("GET", "LIST")
        return (
            client_requests_by_resource(h.target_env, reads),
            client_requests_by_resource(h.hub_env, reads),
            h.target_env.write_requests(),
            h.hub_env.write_requests(),
        )

    # The reconciles are counted around the requests, never inside: the
    # window they span holds the one the requests were counted in. One
    # ``scrape`` (four API server /metrics pages and two audit logs, read
    # and parsed) takes a while under load, and a resync that ran whole
    # between the target's audit log read and a count taken after the
    # scrape had its claim GET counted but not itself: two claim reads for
    # one resync, which no resync made.
    start = h.reconciles()
    before = scrape()
    wait_for(f"{count} resyncs", lambda: h.reconciles() >= start + count, deadline=60)
    after = scrape()
    # Counted after the scrape: a resync under way then counts its requests
    # but not itself, so a bound drawn from the count errs against the
    # operator by at most that one resync (the "+ 1" of the tests' bounds).
    done = h.reconciles() - start
    target_reads, hub_reads, target_writes, hub_writes = (
        _grown(b, a) for b, a in zip(before, after, strict=True)
    )
    return Resyncs(done, target_reads, hub_reads, target_writes, hub_writes)
