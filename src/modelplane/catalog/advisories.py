"""The advisory checks: the spec's "not checked" entries, observed wherever the target lets us.

Each kind is one class: the record the catalog fills in, the facts it reads
(``needs``) and the rule that judges them (``evaluate``). The kinds here are
the ones several components use, and the helpers every kind judges with; a
kind only one component uses lives in that component's module (KAI's
SchedulerName, the DRA driver's, NFD's, Prometheus's). Adding a kind is one
class wherever it lives: ``observe.facts`` reads whatever ``needs`` asks for
and the plan calls ``evaluate``.

Pure, like the planner: facts in, a finding out, no I/O. A finding is
``met``, ``warning`` (observed and wrong) or ``unknown`` (the target does not
let us see it, and the message says why); never ``unmet``, so advisories
never turn RequirementsMet False. Where each fact is seen on a live
cluster: upstream-facts §17.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from modelplane.catalog.facts import (
    ClusterFacts,
    ConfigMapsNamed,
    Fact,
    ObservedWorkload,
    ServiceAt,
)
from modelplane.catalog.types import (
    Component,
    Finding,
    RequirementStatus,
    Values,
    Workloads,
)
from modelplane.untrusted import UntrustedInputError, load_yaml, printable

if TYPE_CHECKING:
    from modelplane.api.spec import ServingStackSpec

MET, WARNING, UNKNOWN = RequirementStatus.MET, RequirementStatus.WARNING, RequirementStatus.UNKNOWN
MAX_LISTED = 5
# How much of one value from the target a message shows (see ``show``).
MAX_SHOWN = 300
# A name the API server accepts is at most 253 characters.
MAX_NAME = 253
# A whole finding's message: several values and a fix, short enough that a
# status listing a few findings stays far below what the hub accepts.
MAX_MESSAGE = 1024


# ---- the kinds -------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadsAvailable:
    """Every image of ``workloads`` runs in a workload that reports Available."""

    workloads: Workloads
    fix: str

    @property
    def title(self) -> str:
        return f"{self.workloads.describe} available"

    def needs(self) -> tuple[Fact, ...]:
        return self.workloads.facts()

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        found = observed(
            self.workloads, facts, f"the state of {self.workloads.describe}", component
        )
        if not isinstance(found, list):
            return found
        missing = [
            tail for tail in self.workloads.images if not any(runs_image(w, tail) for w in found)
        ]
        problems = [f"{ref(w)} is not Available" for w in found if not w.available]
        problems += [f"no {kinds_of(self.workloads)} runs {tail}" for tail in missing]
        if problems:
            return WARNING, f"{'; '.join(problems)}: {self.fix}"
        return MET, f"{listed([ref(w) for w in found])} Available"


@dataclass(frozen=True)
class ConfigFileWired:
    """A ConfigMap key holds a YAML document that carries ``expected``.

    ``expected`` is computed from the spec by the same function that gives the
    Managed install its values, so the wiring is written once. Outside the
    ``exact`` paths the document may hold more (other keys, other list items);
    under them it must hold exactly ``expected``: no extra keys, lists equal
    item for item and in order. ``unset_means`` gives the value an absent key
    has, so spelling out a default is not a difference.
    """

    title: str
    config_map: str  # looked up in the component's namespaces (Component.observed_in)
    key: str
    expected: Callable[[ServingStackSpec], Values]
    fix: str
    exact: tuple[str, ...] = ()  # dotted paths into the document
    unset_means: tuple[tuple[str, Any], ...] = ()  # (dotted path, value when absent)

    def needs(self) -> tuple[Fact, ...]:
        return (ConfigMapsNamed(self.config_map),)

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        if facts.config_maps is None:
            return cannot(facts, "configmaps")
        where = " or ".join(component.observed_in)
        found = [cm for cm in facts.config_maps if cm.name == self.config_map]
        if not found:
            return UNKNOWN, (
                f"no ConfigMap {self.config_map} in namespace {where}, so the live "
                "configuration cannot be read (it may be configured another way, or installed "
                "in another namespace)"
            )
        expected = self.expected(spec)
        failures: list[str] = []
        for cm in found:
            where = f"ConfigMap {named(cm.namespace, cm.name)} key {self.key}"
            if self.key not in cm.data:
                failures.append(f"{where} is missing")
                continue
            try:
                # Whoever may write ConfigMaps in the component's namespace
                # wrote this: aliases, depth and size are bounded before
                # anything walks the document (``modelplane.untrusted``).
                doc = load_yaml(cm.data[self.key])
            except UntrustedInputError as err:
                failures.append(f"{where} cannot be read: {err}")
                continue
            diffs = differences(
                expected, doc, exact=frozenset(self.exact), unset_means=dict(self.unset_means)
            )
            if not diffs:
                return MET, f"{where} holds the expected wiring"
            failures.append(f"{where}: {listed(diffs, sep='; ')}")
        return WARNING, f"{'; '.join(failures)}: {self.fix}"


@dataclass(frozen=True)
class ServicePort:
    """A Service exists at a fixed address and exposes a port."""

    namespace: str
    name: str
    port: int
    fix: str

    @property
    def title(self) -> str:
        return f"Service {self.name}.{self.namespace} exposes port {self.port}"

    def needs(self) -> tuple[Fact, ...]:
        return (ServiceAt(self.namespace, self.name),)

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        if facts.services is None:
            return cannot(facts, "services")
        service = f"Service {self.namespace}/{self.name}"
        address = f"{self.name}.{self.namespace}.svc.cluster.local:{self.port}"
        svc = next(
            (s for s in facts.services if s.namespace == self.namespace and s.name == self.name),
            None,
        )
        if svc is None:
            return WARNING, f"{service} does not exist, so nothing answers at {address}: {self.fix}"
        if self.port not in svc.ports:
            ports = ", ".join(str(p) for p in svc.ports) or "none"
            return WARNING, f"{service} exposes ports {ports}, not {self.port}: {self.fix}"
        return MET, f"{service} exposes port {self.port} ({address})"


@dataclass(frozen=True)
class WorkloadArg:
    """The workload runs with ``flag=value`` (``default`` when the flag is absent)."""

    workloads: Workloads
    flag: str
    value: str
    default: str | None
    fix: str

    @property
    def title(self) -> str:
        return f"{self.workloads.describe} runs with {self.flag}={self.value}"

    def needs(self) -> tuple[Fact, ...]:
        return self.workloads.facts()

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        found = observed(self.workloads, facts, f"its {self.flag}", component)
        if not isinstance(found, list):
            return found
        wrong: list[str] = []
        for w in found:
            value = flag_value(w.args, self.flag)
            shown = (
                f"{self.flag}={value}"
                if value is not None
                else f"no {self.flag} (default {self.default})"
            )
            if (value if value is not None else self.default) != self.value:
                wrong.append(f"{ref(w)} runs with {shown}")
        if wrong:
            return WARNING, f"{'; '.join(wrong)}, not {self.flag}={self.value}: {self.fix}"
        return MET, f"{listed([ref(w) for w in found])} runs with {self.flag}={self.value}"


@dataclass(frozen=True)
class ImageTag:
    """The workload's image tag is a version the product supports.

    With ``exact``, the component's pinned version itself (Grove: an alpha
    API with no compatibility promise); without, any version in the
    component's ``supported`` range. Out of that range always warns.
    """

    workloads: Workloads
    fix: str
    exact: bool = True

    @property
    def title(self) -> str:
        what = "the pinned version" if self.exact else "a supported version"
        return f"{self.workloads.describe} runs {what}"

    def needs(self) -> tuple[Fact, ...]:
        return self.workloads.facts()

    def evaluate(
        self, component: Component, spec: ServingStackSpec, facts: ClusterFacts
    ) -> Finding:
        found = observed(self.workloads, facts, "its version", component)
        if not isinstance(found, list):
            return found
        want = component.version_for(spec)
        supported = component.supported
        wrong: list[str] = []
        unreadable: list[str] = []
        tags: list[str] = []
        for w in found:
            for image in w.images:
                if not any(is_image(image, t) for t in self.workloads.images):
                    continue
                tag = image_tag(image)
                inside = supported.contains(tag) if supported and tag else None
                problems = []
                if self.exact and tag and tag.removeprefix("v") != want.removeprefix("v"):
                    problems.append(f"not {want}")
                if supported and inside is False:
                    problems.append(f"outside the supported range, {supported}: {supported.why}")
                if problems:
                    wrong.append(f"{ref(w)} runs {image}, {', and '.join(problems)}")
                elif tag is None:
                    unreadable.append(f"{ref(w)} runs {image} by digest")
                elif supported and inside is None:
                    unreadable.append(f"{ref(w)} runs {image}, a tag that is not a version")
                else:
                    tags.append(tag)
        if wrong:
            return WARNING, f"{'; '.join(wrong)}: {self.fix}"
        if unreadable:
            return UNKNOWN, f"{'; '.join(unreadable)}, so its version cannot be read"
        refs = listed([ref(w) for w in found])
        if self.exact:
            return MET, f"{refs} runs {want}"
        return MET, f"{refs} runs {', '.join(dict.fromkeys(tags))}, {supported or 'any version'}"


# ---- helpers ---------------------------------------------------------------------------


def listed(items: list[str], sep: str = ", ") -> str:
    """The first MAX_LISTED items joined, and how many more there are."""
    shown = sep.join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


def cannot(facts: ClusterFacts, what: str) -> Finding:
    """UNKNOWN, saying why ``what`` could not be observed."""
    why = facts.unobservable.get(what, "not gathered")
    return UNKNOWN, f"cannot observe {what}: {why}"


def image_repository(image: str) -> str:
    """The image without tag or digest: ``quay.io/jetstack/trust-manager``."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def image_tag(image: str) -> str | None:
    name = image.split("@", 1)[0]
    slash, colon = name.rfind("/"), name.rfind(":")
    return name[colon + 1 :] if colon > slash else None


def is_image(image: str, tail: str) -> bool:
    """Whether the image's repository is ``tail`` or ends with ``/tail``."""
    repo = image_repository(image)
    return repo == tail or repo.endswith("/" + tail)


def runs_image(workload: ObservedWorkload, tail: str) -> bool:
    return any(is_image(image, tail) for image in workload.images)


def matching(spec: Workloads, workloads: list[ObservedWorkload]) -> list[ObservedWorkload]:
    """The observed workloads of ``spec``'s kinds that run one of its images."""
    return [
        w
        for w in workloads
        if w.kind in spec.kinds and any(runs_image(w, tail) for tail in spec.images)
    ]


def named(namespace: str, name: str) -> str:
    """How a message names an object the target holds: ``ns/name``, made printable."""
    return f"{printable(namespace, MAX_NAME)}/{printable(name, MAX_NAME)}"


def ref(w: ObservedWorkload) -> str:
    """How a message names a workload: ``Deployment ns/name``."""
    return f"{w.kind} {named(w.namespace, w.name)}"


def kinds_of(spec: Workloads) -> str:
    """``Deployment or DaemonSet``, for a message."""
    return " or ".join(spec.kinds)


def observed(
    spec: Workloads, facts: ClusterFacts, what: str, component: Component
) -> list[ObservedWorkload] | Finding:
    """The workloads of ``spec`` the facts show, or the finding that says why there are none.

    ``what`` is what their absence leaves unseen, for the message. The facts
    hold only the namespaces the stack's components are observed in
    (``observe.facts.needed_facts``), never a tenant's.
    """
    if facts.workloads is None:
        return cannot(facts, "workloads")
    return matching(spec, facts.workloads) or not_found(spec, what, component)


def not_found(spec: Workloads, what: str, component: Component) -> Finding:
    """UNKNOWN: no workload in the component's namespaces runs ``spec``'s images."""
    return UNKNOWN, (
        f"no {kinds_of(spec)} in namespace {' or '.join(component.observed_in)} runs an image "
        f"{' or '.join(spec.images)}, so {what} cannot be observed (it may run under another "
        "image, in another namespace, or outside the cluster)"
    )


def flag_value(args: list[str], flag: str) -> str | None:
    """The last value given for ``flag`` (``--f=v`` or ``--f v``), or None."""
    value: str | None = None
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
        elif arg == flag and i + 1 < len(args):
            value = args[i + 1]
    return value


def contains(expected: Any, actual: Any, path: str = "") -> list[str]:
    """What in ``expected`` the ``actual`` document lacks, one line per difference.

    Mappings are compared key by key (extra keys in ``actual`` are fine);
    every item of an expected list must match some item of the actual list.
    """
    return differences(expected, actual, path=path)


class _Missing:
    pass


_MISSING = _Missing()


def differences(
    expected: Any,
    actual: Any,
    *,
    exact: frozenset[str] = frozenset(),
    unset_means: dict[str, Any] | None = None,
    path: str = "",
) -> list[str]:
    """How ``actual`` differs from ``expected``, one line per difference, by dotted path.

    Like ``contains``, except under the ``exact`` paths, where ``actual`` must
    be ``expected`` exactly (see ``ConfigFileWired``).
    """
    if path in exact:
        return _exactly(expected, actual, path, unset_means or {})
    where = path or "the document"
    if isinstance(actual, _Missing):
        return [f"{where} is missing"]
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where} is {show(actual)}, not a mapping"]
        return [
            line
            for key, value in expected.items()
            for line in differences(
                value,
                actual.get(key, _MISSING),
                exact=exact,
                unset_means=unset_means,
                path=f"{path}.{key}" if path else str(key),
            )
        ]
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [f"{where} is {show(actual)}, not a list"]
        return [
            f"{where} lacks {show(item)}"
            for item in expected
            if not any(not contains(item, candidate) for candidate in actual)
        ]
    if expected != actual:
        return [f"{where} is {show(actual)}, not {show(expected)}"]
    return []


def _exactly(want: Any, got: Any, path: str, unset_means: dict[str, Any]) -> list[str]:
    if isinstance(got, _Missing):
        if path not in unset_means:
            return [f"{path} is missing (expected {show(want)})"]
        got = unset_means[path]
    if isinstance(want, dict) and isinstance(got, dict):
        out: list[str] = []
        for key, value in want.items():
            out += _exactly(value, got.get(key, _MISSING), f"{path}.{key}", unset_means)
        for key in got.keys() - want.keys():
            sub = f"{path}.{key}"
            if sub not in unset_means:
                out.append(f"{sub} is {show(got[key])}, not unset")
            elif not _same(got[key], unset_means[sub]):
                out.append(f"{sub} is {show(got[key])}, not {show(unset_means[sub])} (unset)")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if _same(want, got):
            return []
        lacks = [item for item in want if not any(_same(item, g) for g in got)]
        extra = [item for item in got if not any(_same(item, w) for w in want)]
        problems = []
        if lacks:
            problems.append("lacks " + ", ".join(show(item) for item in lacks))
        if extra:
            problems.append("has extra " + ", ".join(show(item) for item in extra))
        if not problems:
            same_items = sorted(map(show, want)) == sorted(map(show, got))
            problems.append("is in another order" if same_items else "repeats items")
        return [f"{path} {' and '.join(problems)} (expected {show(want)}, got {show(got)})"]
    if not _same(want, got):
        return [f"{path} is {show(got)}, not {show(want)}"]
    return []


def _same(a: Any, b: Any) -> bool:
    # By canonical JSON, so true is not 1 and 1063 is not "1063". Whole, not
    # cut: both sides passed the parse bounds, and a cut would make two long
    # values that differ at the end equal.
    return _canonical(a) == _canonical(b)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


class _Text(str):
    """A piece of ``show``'s output, as opposed to a value still to be shown."""


def show(value: Any, limit: int = MAX_SHOWN) -> str:
    """A value as a message shows it: canonical JSON, cut to ``limit`` characters.

    Written piece by piece and stopped at the limit, without recursion: a
    value from a target may be an alias graph that is small in memory and
    gigabytes as text, or nested thousands deep, and only the first
    ``limit`` characters of it are ever shown.
    """
    out: list[str] = []
    size = 0
    pending: list[Any] = [value]
    while pending and size <= limit:
        item = pending.pop()
        if isinstance(item, _Text):
            piece: str = item
        elif isinstance(item, dict):
            entries = sorted(item.items(), key=lambda kv: str(kv[0]))
            piece = "{"
            tail: list[Any] = [_Text("}")]
            for i, (key, val) in reversed(list(enumerate(entries))):
                tail += [val, _Text(json.dumps(str(key)) + ": ")]
                if i:
                    tail.append(_Text(", "))
            pending += tail
        elif isinstance(item, (list, tuple)):
            piece = "["
            tail = [_Text("]")]
            for i in range(len(item) - 1, -1, -1):
                tail.append(item[i])
                if i:
                    tail.append(_Text(", "))
            pending += tail
        else:
            piece = json.dumps(item, default=str)
        out.append(piece)
        size += len(piece)
    return printable("".join(out), limit)
