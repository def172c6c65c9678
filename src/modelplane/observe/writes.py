"""What a reconcile wrote to its target, and whether a watch's copy shows it yet.

A reconcile that applied the product's configuration used to read the
whole target again twice (the next round, and the reconcile its own
writes woke), because the watches' events of those writes might still be
on their way. Each read is discovery and some twenty LISTs, and at 3,000
targets a shard those reads queued behind each other for minutes. Instead
the reconcile notes the resourceVersion each apply answered with, and
trusts the copy once it holds every written object at that version or a
later one: then the copy is what a direct read would have returned.

Resource versions of one resource are comparable integers since
Kubernetes 1.35 (KEP-5504, stable; client-go's
``k8s.io/apimachinery/pkg/util/resourceversion.CompareResourceVersion``).
A target that serves anything else is compared by equality only, which
still holds until someone else changes the object after us; then the
reconcile reads directly, as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from modelplane.kube.collection_copy import object_name_key
from modelplane.kube.reflector import WatchKey
from modelplane.plan.selector import selects
from modelplane.untrusted import as_dict

# KEP-5504's form: a positive integer, no leading zero.
_COMPARABLE = re.compile(r"[1-9][0-9]*")


@dataclass(frozen=True)
class Written:
    """One object applied, at the resourceVersion the target answered with."""

    api_version: str
    kind: str
    namespace: str
    name: str
    labels: tuple[tuple[str, str], ...]
    resource_version: str

    @property
    def key(self) -> str:
        """Its key in a reflector's copy (``kube.collection_copy.object_name_key``)."""
        return object_name_key({"metadata": {"namespace": self.namespace, "name": self.name}})


@dataclass
class Writes:
    """What one reconcile wrote, so far; ``untracked`` once it wrote what no answer dates (helm)."""

    objects: list[Written] = field(default_factory=list)
    untracked: bool = False

    def applied(self, body: dict[str, Any], resource_version: str | None) -> None:
        """Note an apply of ``body`` that answered ``resource_version``."""
        meta = as_dict(body.get("metadata"))
        if not resource_version:
            self.untracked = True
            return
        labels = as_dict(meta.get("labels"))
        self.objects.append(
            Written(
                api_version=str(body.get("apiVersion", "")),
                kind=str(body.get("kind", "")),
                namespace=str(meta.get("namespace") or ""),
                name=str(meta.get("name") or ""),
                labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
                resource_version=resource_version,
            )
        )


def at_or_after(seen: str, wrote: str) -> bool:
    """Whether a copy at ``seen`` includes a write that answered ``wrote``.

    Compared as KEP-5504 compares them (length, then digits: no int of a
    target's choosing is ever built), or by equality when either is not of
    that form.
    """
    if seen == wrote:
        return True
    if not (_COMPARABLE.fullmatch(seen) and _COMPARABLE.fullmatch(wrote)):
        return False
    return (len(seen), seen) > (len(wrote), wrote)


def covers(key: WatchKey, w: Written) -> bool:
    """Whether the collection ``key`` watches holds ``w`` once its event arrives."""
    if key.namespace is not None and key.namespace != w.namespace:
        return False
    fields = {"metadata.name": w.name, "metadata.namespace": w.namespace}
    # The product's selectors, in the form ``plan.selector.selects`` reads.
    return (not key.labels or selects(key.labels, dict(w.labels))) and (
        not key.fields or selects(key.fields, fields)
    )
