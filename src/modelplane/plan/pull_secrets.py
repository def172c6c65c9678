"""Which pull Secrets each component's pods need on the target, and which are missing: pure.

A pod names its pull Secrets by name only, and the kubelet reads them from
the pod's own namespace; a missing one is no error at admission, only an
``ImagePullBackOff`` later. So the plan says, per component, which of the
``--image-pull-secret`` Secrets its namespaces lack, from what the target
was seen to hold (their presence only: ``observe.state`` reads their
metadata, never their data). Nothing is held back for it: the release
installs, and the report clears once the Secret is there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from modelplane.catalog.advisories import listed
from modelplane.catalog.images import PullSecrets
from modelplane.catalog.types import Component
from modelplane.vocabulary import PullSecretsReason

# The reason a component's message and the condition give.
PULL_SECRET_MISSING = PullSecretsReason.PULL_SECRET_MISSING

# The kinds whose objects run pods from ``spec.template``, as the product composes them.
_POD_TEMPLATES = frozenset({"Deployment", "DaemonSet", "StatefulSet", "Job"})


class MissingPullSecret(BaseModel):
    """A pull Secret a component's pods name that its namespace does not hold."""

    model_config = ConfigDict(frozen=True)

    component: str
    secret: str
    namespace: str

    def __str__(self) -> str:
        return f"{self.secret} in {self.namespace}"


def component_namespaces(component: Component) -> tuple[str, ...]:
    """The namespaces whose pods pull with the component's pull Secrets; () when it takes none.

    Its own namespace (a component of objects only may have none) and the
    others its ``PullSecrets`` names (the AI Gateway's extProc runs in Envoy
    Gateway's proxies; the ModelExpress server in ``default``).
    """
    pull = component.images.pull_secrets
    if pull is None:
        return ()
    return tuple(ns for ns in dict.fromkeys((component.namespace, *pull.namespaces)) if ns)


def pulls_without(pull: PullSecrets | None, refused: Sequence[str]) -> bool:
    """Whether a chart's pods take none of the pull Secrets: it reads none of their paths.

    ``refused`` are the release's values paths the chart does not read
    (plan.chart_values). Such a component's namespaces need not hold the
    Secrets; the plan's notes say its pods pull without them.
    """
    return pull is not None and bool(pull.paths) and all(p in refused for p in pull.paths)


def object_namespace(body: Mapping[str, Any]) -> str | None:
    """The namespace of an object's pods when its pod template names pull Secrets."""
    if body.get("kind") not in _POD_TEMPLATES:
        return None
    spec = ((body.get("spec") or {}).get("template") or {}).get("spec") or {}
    if not spec.get("imagePullSecrets"):
        return None
    namespace = (body.get("metadata") or {}).get("namespace")
    return str(namespace) if namespace else None


def needed(
    components: Iterable[Component], objects: Iterable[tuple[str, Mapping[str, Any]]]
) -> dict[str, tuple[str, ...]]:
    """Component -> the namespaces that must hold every pull Secret, in plan order.

    ``components`` are those the plan installs or applies (the catalog says
    where their pods pull); ``objects`` the (component, body) pairs it
    applies, so that a pod template that names pull Secrets in a namespace
    no record lists is not missed.
    """
    out: dict[str, list[str]] = {}
    for component in components:
        for namespace in component_namespaces(component):
            out.setdefault(component.name, []).append(namespace)
    covered = {ns for spaces in out.values() for ns in spaces}
    for owner, body in objects:
        where = object_namespace(body)
        if where is not None and where not in covered:
            covered.add(where)
            out.setdefault(owner, []).append(where)
    return {name: tuple(spaces) for name, spaces in out.items()}


def missing(
    wanted: Mapping[str, Sequence[str]],
    secrets: Sequence[str],
    present: Mapping[str, Sequence[str]],
) -> list[MissingPullSecret]:
    """Each (component, Secret, namespace) the target lacks.

    ``present`` is Secret name -> the namespaces it was seen in; a name it
    does not hold was not observed (offline, or unreadable), and nothing is
    said about it: a guess would read as a finding.
    """
    out: list[MissingPullSecret] = []
    for component, namespaces in wanted.items():
        for namespace in namespaces:
            for secret in secrets:
                seen = present.get(secret)
                if seen is not None and namespace not in seen:
                    out.append(
                        MissingPullSecret(component=component, secret=secret, namespace=namespace)
                    )
    return out


def component_message(found: Sequence[MissingPullSecret]) -> str:
    """``PullSecretMissing: regcred in cert-manager``, for one component's status."""
    return f"{PULL_SECRET_MISSING}: {listed([str(m) for m in found])}"


def condition_message(found: Sequence[MissingPullSecret]) -> str:
    """Every missing Secret, by component, for the condition."""
    by_component: dict[str, list[str]] = {}
    for m in found:
        by_component.setdefault(m.component, []).append(str(m))
    return "; ".join(f"{name}: {listed(items)}" for name, items in by_component.items())
