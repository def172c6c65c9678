"""Pydantic models of the ServingStack custom resource.

The models are the single source of the API: the CRD's OpenAPI schema is
generated from them (see ``modelplane.api.crd``), so every limit, enum and
default written here is what the hub's API server enforces too. Cross-field
rules that a structural schema cannot express are model validators here and
CEL rules in the CRD, with the same messages.

The version pins (``Versions``, ``StandardVersions``, ``DynamoVersions``) are
made from the catalog: each component's record names its field, description
and default, so a version string is written once, in its component's module.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

from cryptography import x509
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from modelplane import pins
from modelplane.catalog.components import COMPONENTS
from modelplane.catalog.types import Component
from modelplane.pins import ComponentsMode, Stack
from modelplane.untrusted import printable

API_GROUP = "infrastructure.modelplane.ai"
API_VERSION = "v1alpha1"
KIND = "ServingStack"
PLURAL = "servingstacks"
SHORT_NAME = "ss"


class _Model(BaseModel):
    """Camel-case on the wire, snake_case in Python, unknown fields refused.

    Input is read by alias only: the API server knows only the wire names and
    refuses ``nvidia_driver_root``, so the models (and ``render``) must too.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        extra="forbid",
        frozen=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        # The API server prunes a null from a field that is not nullable
        # before it defaults and validates, so "className: null" is the
        # default there; the models read it the same way.
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


def _integral(value: Any) -> Any:
    # The API server takes 80.0 for an integer field (JSON has one number
    # type); "80" and true it refuses, and so does the strict check after this.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class SecretType(StrEnum):
    KUBECONFIG = "Kubeconfig"
    GOOGLE_APPLICATION_CREDENTIALS = "GoogleApplicationCredentials"
    AWS_WEB_IDENTITY_CREDENTIALS = "AWSWebIdentityCredentials"
    NEBIUS_SERVICE_ACCOUNT_CREDENTIALS = "NebiusServiceAccountCredentials"


class ListenerProtocol(StrEnum):
    HTTP = "HTTP"
    TCP = "TCP"


KUBECONFIG_RULE = "exactly one secrets entry must have type Kubeconfig"
NAMESPACE_RULE = "namespace may be set only on cloud identity entries, not on the Kubeconfig entry"
IDENTITY_RULE = "at most one cloud identity entry (a type other than Kubeconfig) may be given"
LISTENER_NAMES_RULE = "listener names must be unique"
CLIENT_CA_NAMES_RULE = "clientCAs names must be unique"
# The Gateway API refuses two listeners of one port, protocol and hostname
# (its CRD's CEL rule "Combination of port, protocol and hostname must be
# unique for each listener", gateway.networking.k8s.io_gateways.yaml v1.5.1),
# and marks HTTP and TCP on one port Conflicted (Listener docs: listeners
# sharing a port must be compatible; a TCP listener takes the whole port).
# These listeners have no hostname and only those two protocols, so any two
# on one port fail on the target.
LISTENER_PORTS_RULE = (
    "listener ports must be unique: the Gateway API refuses two listeners on one port "
    "and protocol, and HTTP and TCP on one port conflict"
)


# --- string grammars -------------------------------------------------------------
#
# Each grammar is written once and used twice: by the models (Python ``re``)
# and, through the generated CRD, by the API server (Go's RE2, which reads the
# ECMA-262 subset OpenAPI asks for). So every pattern stays in what the three
# share: anchored with ^...$ (Go searches, Python is asked to fullmatch, and a
# trailing newline matches neither), ASCII classes spelled out instead of \d or
# \w (Python's \d matches any Unicode digit), no lookaround, no backreferences.
# No pattern matches one string in more than one way (a path segment is
# leading dots, one non-dot, then anything), so Python's backtracking stays
# short: tens of microseconds at each field's maximum length.


class Grammar:
    """A pattern a string field must match, and what to tell a person who missed it."""

    def __init__(self, pattern: str, must: str) -> None:
        self.pattern = pattern
        self.must = must
        self._compiled = re.compile(pattern)

    def matches(self, value: str) -> bool:
        return self._compiled.fullmatch(value) is not None

    def check(self, value: str) -> str:
        if not self.matches(value):
            # repr() keeps a control character in the value from reaching a
            # terminal or an event as itself; the cut keeps a 16 KiB value short.
            shown = repr(value) if len(value) <= 80 else repr(value[:80]) + "..."
            raise PydanticCustomError(
                "grammar_mismatch",
                "{must} (got {shown})",
                {"must": self.must, "shown": shown},
            )
        return value

    @property
    def schema(self) -> dict[str, Any]:
        return {"pattern": self.pattern}


_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
# The Kubernetes object name (apimachinery IsDNS1123Subdomain), and the
# pattern the Gateway API puts on a SectionName, the type of a listener name
# (gateway.networking.k8s.io_gateways.yaml at v1.5.1, listeners[].name;
# /work/shared/fixtures/upstream/gateway-api-standard). A GatewayClass, whose
# name is spec.gateway.className, is an object, so its name is one too.
DNS_SUBDOMAIN = Grammar(
    f"^{_LABEL}(\\.{_LABEL})*$",
    "must be a lowercase DNS-1123 subdomain: labels of a-z, 0-9 and '-', starting and "
    "ending with a letter or digit, separated by '.'",
)
DNS_LABEL = Grammar(
    f"^{_LABEL}$",
    "must be a lowercase DNS-1123 label: a-z, 0-9 and '-', starting and ending with a "
    "letter or digit",
)
# The Gateway API's Hostname (same CRD, listeners[].hostname) is a subdomain
# with an optional "*." and "IPs are not allowed" in its description, which
# its pattern cannot tell. Here: no wildcard (the gateway's certificate is for
# one name), labels of at most 63 characters (RFC 1035 §2.3.4), and a last
# label that starts with a letter, which RFC 1123 §2.1 gives as what tells a
# name from a dotted-decimal address.
_HOST_LABEL = "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
HOSTNAME = Grammar(
    f"^({_HOST_LABEL}\\.)*[a-z]([-a-z0-9]{{0,61}}[a-z0-9])?$",
    "must be a lowercase DNS name without a wildcard: labels of a-z, 0-9 and '-' of at "
    "most 63 characters separated by '.', the last starting with a letter (an IP address "
    "is not a hostname)",
)
# Secret data keys: apimachinery IsConfigMapKey (pkg/util/validation), its
# character set and its hasChDirPrefix: not ".", not "..", not starting with
# "..". Without lookahead: an optional first dot, then a character that is
# not one.
SECRET_KEY = Grammar(
    "^\\.?[-_a-zA-Z0-9][-._a-zA-Z0-9]*$",
    "must be a Secret key: letters, digits, '-', '_' and '.', not '.' or '..' and not "
    "starting with '..'",
)
# A chart version is SemVer 2 (helm.sh/docs/topics/charts, "Charts and
# Versioning"); the grammar is semver.org's, with the leading "v" charts such
# as cert-manager and Envoy Gateway publish under. Every pin in
# modelplane.pins matches it (v0.1.0-alpha.12-rc2 included). Helm reads a
# version with Masterminds/semver v3, whose NewVersion parses major, minor
# and patch with strconv.ParseUint(..., 10, 64) (version.go, v3.4.0): at most
# 19 digits always fits, so a number Helm cannot read is refused here.
_NUMBER = "(0|[1-9][0-9]{0,18})"
_PRERELEASE_ID = "(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
CHART_VERSION = Grammar(
    f"^v?{_NUMBER}\\.{_NUMBER}\\.{_NUMBER}"
    f"(-{_PRERELEASE_ID}(\\.{_PRERELEASE_ID})*)?"
    "(\\+[0-9a-zA-Z-]+(\\.[0-9a-zA-Z-]+)*)?$",
    "must be a chart version: SemVer 2 such as 1.2.3 or v0.1.0-alpha.1, with an "
    "optional leading 'v'",
)
# An image tag (OCI distribution spec, "tag"). No '/', '?', '#' or '%': the
# ModelExpress tag is also a path segment of the URL its CRDs are fetched
# from, and that URL adds the git tag's "v" itself, so "v0.5.0" would fetch
# ".../vv0.5.0/...": a "v" before a digit is refused (not stripped, so what
# the hub stores is what the server image is pulled with).
IMAGE_TAG = Grammar(
    "^([A-Za-uw-z0-9_][A-Za-z0-9._-]{0,127}|v([A-Za-z._-][A-Za-z0-9._-]{0,126})?)$",
    "must be an image tag: a letter, digit or '_', then letters, digits, '.', '_' or '-', "
    "and no 'v' before the version (write 0.5.0, not v0.5.0: the CRDs' URL adds the 'v')",
)
# A client CA: PEM CERTIFICATE blocks only (RFC 7468 section 5, strict form:
# no explanatory text, base64 lines only), so a key or anything else is
# refused where the API server can see it. Whitespace is spelled out:
# Python's \s takes Unicode spaces that Go's does not.
_PEM_CERTIFICATE = (
    "-----BEGIN CERTIFICATE-----\\r?\\n([A-Za-z0-9+/=]+\\r?\\n)+-----END CERTIFICATE-----"
)
CERTIFICATE_PEM = Grammar(
    f"^([ \\t\\r\\n]*{_PEM_CERTIFICATE})+[ \\t\\r\\n]*$",
    "must be one or more PEM CERTIFICATE blocks (-----BEGIN CERTIFICATE----- ... "
    "-----END CERTIFICATE-----) and nothing else",
)
_PEM_BLOCK = re.compile(_PEM_CERTIFICATE)
# A private key under any PEM label (PRIVATE KEY, RSA PRIVATE KEY, ENCRYPTED ...).
PRIVATE_KEY_MARK = "PRIVATE KEY"
# A host path handed to the DRA driver's hostPath mounts: absolute and clean
# (no empty, '.' or '..' segment, no trailing '/'), of POSIX portable filename
# characters. A segment starts with its dots, then one non-dot, so it is
# never all dots.
HOST_PATH = Grammar(
    "^(/|(/\\.*[A-Za-z0-9_-][A-Za-z0-9._-]*)+)$",
    "must be an absolute, clean path such as / or /home/kubernetes/bin/nvidia: no empty, "
    "'.' or '..' segment, no trailing '/', letters, digits, '.', '_' and '-' only",
)


# String types that must match a grammar, in the models and (as the pattern) in the CRD.
DnsSubdomain = Annotated[
    str, Field(json_schema_extra=DNS_SUBDOMAIN.schema), AfterValidator(DNS_SUBDOMAIN.check)
]
DnsLabel = Annotated[
    str, Field(json_schema_extra=DNS_LABEL.schema), AfterValidator(DNS_LABEL.check)
]
# An optional field's own length limits would be checked after the grammar
# (on the union), so these carry theirs inside.
Hostname = Annotated[
    str,
    Field(min_length=1, max_length=253, json_schema_extra=HOSTNAME.schema),
    AfterValidator(HOSTNAME.check),
]
# A namespace's name is a DNS label (apimachinery ValidateNamespaceName): 63 at most.
SecretNamespace = Annotated[
    str,
    Field(min_length=1, max_length=63, json_schema_extra=DNS_LABEL.schema),
    AfterValidator(DNS_LABEL.check),
]
SecretKey = Annotated[
    str, Field(json_schema_extra=SECRET_KEY.schema), AfterValidator(SECRET_KEY.check)
]
HostPath = Annotated[
    str, Field(json_schema_extra=HOST_PATH.schema), AfterValidator(HOST_PATH.check)
]
VersionPin = Annotated[
    str,
    Field(min_length=1, max_length=32, json_schema_extra=CHART_VERSION.schema),
    AfterValidator(CHART_VERSION.check),
]
ImageTag = Annotated[
    str,
    Field(min_length=1, max_length=32, json_schema_extra=IMAGE_TAG.schema),
    AfterValidator(IMAGE_TAG.check),
]


class SecretRef(_Model):
    """A credential the operator reads to reach the target cluster."""

    type: SecretType = Field(
        description="The type of credential this secret contains. Kubeconfig is required; "
        "any other value is a cloud identity the operator authenticates as instead of the "
        "kubeconfig's embedded credentials."
    )
    # The name goes into the path of the hub request that reads the Secret:
    # "x/../../../kube-system/secrets/y" would read another namespace's Secret.
    name: DnsSubdomain = Field(min_length=1, max_length=253, description="Name of the Secret.")
    key: SecretKey = Field(
        min_length=1, max_length=253, description="Key within the Secret that holds the credential."
    )
    namespace: SecretNamespace | None = Field(
        default=None,
        description="Namespace of the Secret when it is not this ServingStack's namespace. "
        "Allowed only on cloud identity entries.",
    )

    @model_validator(mode="after")
    def _namespace_only_on_identity(self) -> SecretRef:
        if self.type is SecretType.KUBECONFIG and self.namespace is not None:
            raise ValueError(NAMESPACE_RULE)
        return self


class Listener(_Model):
    name: DnsSubdomain = Field(
        min_length=1,
        max_length=63,
        description="Unique listener name: a lowercase DNS subdomain, as the Gateway API "
        "requires of a listener's name.",
    )
    # The API server refuses "80" and true for an integer; so does the model.
    port: Annotated[int, BeforeValidator(_integral)] = Field(
        ge=1, le=65535, strict=True, description="Port number for this listener."
    )
    protocol: ListenerProtocol = Field(description="Protocol for this listener.")


class ClientCA(_Model):
    # Not a key anywhere (every CA goes into one bundle key), but the name of
    # an InferenceGateway, so an object name.
    name: DnsSubdomain = Field(
        min_length=1, max_length=253, description="The InferenceGateway this CA belongs to."
    )
    certificate: str = Field(
        min_length=1,
        max_length=16384,
        json_schema_extra=CERTIFICATE_PEM.schema,
        description="The CA certificate, PEM encoded: CERTIFICATE blocks only.",
    )

    @field_validator("certificate")
    @classmethod
    def _certificates_only(cls, value: str, info: ValidationInfo) -> str:
        entry = printable(info.data.get("name", "?"), 253)
        if PRIVATE_KEY_MARK in value:
            raise ValueError(private_key_message(entry))
        if not CERTIFICATE_PEM.matches(value):
            raise ValueError(f"clientCAs entry {entry}: {CERTIFICATE_PEM.must}")
        # The API server sees only the PEM's shape; what is inside is read
        # here, so render and the operator refuse a block that is no
        # certificate instead of turning on a listener no client passes.
        for index, block in enumerate(_PEM_BLOCK.finditer(value), 1):
            try:
                x509.load_pem_x509_certificate(block[0].encode("ascii"))
            except ValueError:
                raise ValueError(
                    f"clientCAs entry {entry}: block {index} is not an X.509 certificate"
                ) from None
        return value

    def certificates(self) -> list[x509.Certificate]:
        return [
            x509.load_pem_x509_certificate(block[0].encode("ascii"))
            for block in _PEM_BLOCK.finditer(self.certificate)
        ]


def private_key_message(entry: str) -> str:
    """The refusal of a clientCAs entry holding a key; the CRD's CEL rule builds the same."""
    return (
        f"clientCAs entry {entry} holds a PRIVATE KEY block: give the CA certificate "
        "only, never its key"
    )


def client_ca_warnings(spec: ServingStackSpec, now: datetime.datetime | None = None) -> list[str]:
    """What is wrong with admitted client CAs but does not stop them: not a CA, expired.

    A warning and not a refusal: the certificate may be renewed, or the
    verifier may accept it, and an operator must not stop serving over it.
    """
    now = now or datetime.datetime.now(datetime.UTC)
    out: list[str] = []
    for ca in spec.gateway.client_cas:
        for index, cert in enumerate(ca.certificates(), 1):
            which = f"clientCAs entry {ca.name}, certificate {index}"
            try:
                is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
            except (x509.ExtensionNotFound, ValueError):  # absent, or not decodable
                is_ca = False
            if not is_ca:
                out.append(
                    f"{which} is not a CA (no basicConstraints CA:TRUE), so the gateway "
                    "may refuse the client certificates it issued"
                )
            if cert.not_valid_after_utc < now:
                out.append(
                    f"{which} expired on {cert.not_valid_after_utc:%Y-%m-%d}: clients "
                    "holding certificates it issued are refused"
                )
            elif cert.not_valid_before_utc > now:
                out.append(f"{which} is not valid until {cert.not_valid_before_utc:%Y-%m-%d}")
    return out


class GatewaySpec(_Model):
    class_name: DnsSubdomain = Field(
        default=pins.GATEWAY_CLASS_NAME,
        min_length=1,
        max_length=63,
        description="GatewayClass name. Override if the cluster already has a GatewayClass "
        "with this name.",
    )
    hostname: Hostname | None = Field(
        default=None,
        description="The name this cluster's gateway is reached by. The gateway serves a "
        "certificate for it; without it the gateway serves plain HTTP and carries no fleet "
        "traffic.",
    )
    listeners: list[Listener] = Field(
        default_factory=list, max_length=8, description="Listeners of the Gateway."
    )
    client_cas: list[ClientCA] = Field(
        default_factory=list,
        max_length=32,
        alias="clientCAs",
        description="CA certificates of the InferenceGateways allowed to connect.",
    )

    @field_validator("listeners")
    @classmethod
    def _unique_listener_names(cls, listeners: list[Listener]) -> list[Listener]:
        names = [listener.name for listener in listeners]
        if len(names) != len(set(names)):
            raise ValueError(LISTENER_NAMES_RULE)
        ports = [listener.port for listener in listeners]
        if len(ports) != len(set(ports)):
            raise ValueError(LISTENER_PORTS_RULE)
        return listeners

    @field_validator("client_cas")
    @classmethod
    def _unique_client_ca_names(cls, cas: list[ClientCA]) -> list[ClientCA]:
        names = [ca.name for ca in cas]
        if len(names) != len(set(names)):
            raise ValueError(CLIENT_CA_NAMES_RULE)
        return cas


class _Pins(_Model):
    """A group of version pins; its fields are the catalog's (see ``pins_model``)."""

    if TYPE_CHECKING:
        # Fields are made from the catalog at import, so the type checker
        # cannot see them: every one is a version string.
        def __getattr__(self, name: str) -> str: ...


# Spec field -> (model name, docstring, the stacks its components are on).
_PIN_GROUPS: dict[str, tuple[str, str, frozenset[Stack]]] = {
    "versions": (
        "Versions",
        "Version pins for components of both stacks.",
        frozenset({Stack.STANDARD, Stack.DYNAMO}),
    ),
    "standard": (
        "StandardVersions",
        "Version pins for Standard-stack components. Ignored when stack is Dynamo.",
        frozenset({Stack.STANDARD}),
    ),
    "dynamo": (
        "DynamoVersions",
        "Version pins for Dynamo-stack components. Ignored when stack is Standard.",
        frozenset({Stack.DYNAMO}),
    ),
}
_VERSION_TYPES: dict[str, Any] = {"chart": VersionPin, "image": ImageTag}


def pins_model(group: str, components: Sequence[Component] = COMPONENTS) -> type[_Pins]:
    """The model of one ``spec.<group>``: a field for each component whose version_field is in it.

    Fields go in order of their wire names, as they did when written by hand,
    so a new one lands among them and the others keep their place in the CRD.
    """
    name, doc, stacks = _PIN_GROUPS[group]
    fields: dict[str, Any] = {}
    for component in components:
        if component.version_field is None:
            continue
        where, _, wire = component.version_field.partition(".")
        if where not in _PIN_GROUPS:
            raise ValueError(
                f"{component.name}: version_field {component.version_field!r} is not under "
                f"one of spec.{', spec.'.join(_PIN_GROUPS)}"
            )
        if where != group:
            continue
        if component.stacks != stacks:
            raise ValueError(
                f"{component.name} is on {sorted(component.stacks)}, but spec.{group} pins "
                f"components of {sorted(stacks)}"
            )
        python = re.sub("([A-Z])", lambda m: "_" + m[1].lower(), wire)
        if to_camel(python) != wire or not component.version_description:
            raise ValueError(
                f"{component.name}: version_field {component.version_field!r} needs a camelCase "
                "name and a version_description"
            )
        if python in fields:
            raise ValueError(f"{component.name}: another component has {component.version_field}")
        fields[python] = (
            _VERSION_TYPES[component.version_format],
            Field(default=component.version, description=component.version_description),
        )
    ordered = dict(sorted(fields.items(), key=lambda item: to_camel(item[0])))
    return create_model(name, __base__=_Pins, __doc__=doc, __module__=__name__, **ordered)


if TYPE_CHECKING:
    Versions = _Pins
    StandardVersions = _Pins
    DynamoVersions = _Pins
else:
    Versions = pins_model("versions")
    StandardVersions = pins_model("standard")
    DynamoVersions = pins_model("dynamo")


class ServingStackSpec(_Model):
    """The desired serving substrate of one target cluster."""

    secrets: list[SecretRef] = Field(
        min_length=1,
        max_length=8,
        description="Credentials for the target cluster: one Kubeconfig entry and at most "
        "one cloud identity.",
    )
    stack: Stack = Field(default=Stack.STANDARD, description="Which serving stack this installs.")
    components: ComponentsMode = Field(
        default=ComponentsMode.MANAGED,
        description="Managed installs every substrate component; Provided installs none "
        "and checks that the cluster serves what they would have.",
    )
    nvidia_driver_root: HostPath = Field(
        default=pins.NVIDIA_DRIVER_ROOT,
        min_length=1,
        max_length=512,
        description="Host path of the NVIDIA driver, absolute and clean, passed to the DRA "
        "driver. A non-default "
        "value also composes a ResourceQuota admitting the DRA driver's system-critical pods.",
    )
    versions: Versions = Field(default_factory=Versions, description="Version pins.")
    standard: StandardVersions = Field(
        default_factory=StandardVersions, description="Standard-stack version pins."
    )
    dynamo: DynamoVersions = Field(
        default_factory=DynamoVersions, description="Dynamo-stack version pins."
    )
    gateway: GatewaySpec = Field(
        default_factory=GatewaySpec, description="The cluster's inference traffic gateway."
    )

    # Each rule is checked on the field it is about, so an error names that
    # field's path (spec.secrets, spec.gateway.listeners, ...), as the CRD's
    # CEL rules do.
    @field_validator("secrets")
    @classmethod
    def _secrets_rules(cls, secrets: list[SecretRef]) -> list[SecretRef]:
        kubeconfigs = [s for s in secrets if s.type is SecretType.KUBECONFIG]
        if len(kubeconfigs) != 1:
            raise ValueError(KUBECONFIG_RULE)
        if len(secrets) - len(kubeconfigs) > 1:
            raise ValueError(IDENTITY_RULE)
        return secrets

    @property
    def kubeconfig_secret(self) -> SecretRef:
        return next(s for s in self.secrets if s.type is SecretType.KUBECONFIG)

    @property
    def cloud_identity(self) -> SecretRef | None:
        return next((s for s in self.secrets if s.type is not SecretType.KUBECONFIG), None)


class Condition(_Model):
    """A Kubernetes-style condition."""

    type: str
    status: str
    reason: str
    message: str
    observed_generation: int | None = None
    last_transition_time: str | None = None


class ComponentStatus(_Model):
    name: str
    mode: ComponentsMode
    version: str | None = Field(default=None, description="The desired version.")
    installed_version: str | None = Field(
        default=None,
        description="The version installed on the target; differs from version while an "
        "upgrade waits for the rollout or runs.",
    )
    state: str
    message: str = ""


class RolloutStatus(_Model):
    """This stack's place in the fleet's staged rollout of upgrades (plan.rollout)."""

    phase: str = Field(description="UpToDate, Pending, Upgrading, Failed or Resumed.")
    started_at: str | None = Field(default=None, description="When its upgrade started.")
    paused_by: str | None = Field(
        default=None, description="The stack whose failed upgrade pauses the rollout."
    )


class GatewayStatus(_Model):
    address: str | None = Field(
        default=None,
        max_length=256,
        description="The gateway's external address, once assigned.",
    )
    ca_certificate: str | None = Field(
        default=None,
        max_length=16384,
        description="PEM certificate of the CA that signed this gateway's serving certificate.",
    )


class DeviceGroupStatus(_Model):
    product: str = Field(description="The GPU's product name, as the DRA driver publishes it.")
    count: int = Field(ge=0, description="GPUs of this product, memory and driver version.")
    memory: str = Field(default="", description="Memory per GPU, a quantity (81559Mi).")
    driver_version: str = Field(default="", description="The NVIDIA driver version.")
    nodes: int = Field(ge=0, description="Nodes that have them.")


class TargetStatus(_Model):
    """What the target cluster offers, as last read (plan.capacity.summarize_target)."""

    kubernetes_version: str = Field(default="", description="The target's GET /version.")
    gpu_nodes: int = Field(default=0, ge=0, description="Nodes with any sign of a GPU.")
    gpus: int = Field(
        default=0, ge=0, description="GPU devices the DRA driver publishes in ResourceSlices."
    )
    devices: list[DeviceGroupStatus] = Field(
        default_factory=list, description="The GPUs by product, most numerous first."
    )
    other_devices: int = Field(
        default=0, ge=0, description="GPUs of the products left out of devices."
    )


class ServingStackStatus(_Model):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    components: list[ComponentStatus] = Field(default_factory=list)
    gateway: GatewayStatus | None = None
    image_mirrors: list[str] = Field(
        default_factory=list,
        description="The image mirror rules in force (FROM=TO), as the operator was given them.",
    )
    target: TargetStatus | None = None
    rollout: RolloutStatus | None = None


# --- metadata, as the API server validates it for a custom resource -------------
#
# apimachinery's ValidateObjectMetaAccessor (pkg/api/validation/objectmeta.go,
# v0.34), which the apiextensions server runs on every custom resource with
# NameIsDNSSubdomain for its name: labels by ValidateLabels (a key is a
# qualified name, a value IsValidLabelValue), annotation keys by
# IsQualifiedName of the key lowercased, and the annotations' keys and values
# at most TotalAnnotationSizeLimitB (256 KiB) in all; finalizers qualified
# names, not both orphan and foregroundDeletion. IsQualifiedName
# (pkg/util/validation/validation.go): an optional DNS-1123 subdomain prefix
# (at most 253) and '/', then a name of at most 63 matching
# [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?.

_QUALIFIED_NAME = re.compile("[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SUBDOMAIN = re.compile(f"{_LABEL}(\\.{_LABEL})*")
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
_FIELD_LIMIT = 80  # of a key shown in a message


def qualified_name_problem(value: str) -> str | None:
    """Why ``value`` is not a qualified name (a label key), or None if it is one."""
    parts = value.split("/")
    if len(parts) > 2:
        return "has more than one '/'"
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return "has an empty prefix before '/'"
        if len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix):
            return "has a prefix that is not a lowercase DNS-1123 subdomain of at most 253"
    name = parts[-1]
    if not name:
        return "has an empty name"
    if len(name) > 63:
        return "has a name longer than 63 characters"
    if not _QUALIFIED_NAME.fullmatch(name):
        return (
            "has a name that is not letters, digits, '-', '_' and '.', starting and ending "
            "with a letter or digit"
        )
    return None


def _shown(key: str) -> str:
    return repr(printable(key, _FIELD_LIMIT))


# The rest of ObjectMeta (metav1, v1.34), mostly set by the API server, with
# the JSON type each decodes from: kept as extras (``model_extra``, where
# readers of the uid look), any other field refused as the API server's
# strict field validation does.
_META_EXTRAS: dict[str, type] = {
    "generateName": str,
    "uid": str,
    "resourceVersion": str,
    "creationTimestamp": str,
    "deletionTimestamp": str,
    "deletionGracePeriodSeconds": int,
    "selfLink": str,
    "ownerReferences": list,
    "managedFields": list,
}


# metav1.OwnerReference's fields and their JSON types, and the one kind
# that may own nothing (BannedOwners, objectmeta.go: core v1 Event).
_OWNER_FIELDS: dict[str, type] = {
    "apiVersion": str,
    "kind": str,
    "name": str,
    "uid": str,
    "controller": bool,
    "blockOwnerDeletion": bool,
}
_BANNED_OWNERS = frozenset({("", "v1", "Event")})


def owner_references_problem(references: list[Any]) -> str | None:
    """Why the API server refuses ``ownerReferences``, or None if it takes them.

    ValidateOwnerReferences (objectmeta.go): a version, a kind, a name and
    a uid in each, no banned owner, and at most one controller; the strict
    decoder refuses any other field, and a value of another JSON type.
    """
    controller = None
    for index, reference in enumerate(references):
        where = f"ownerReferences[{index}]"
        if not isinstance(reference, dict):
            return f"{where} must be an object"
        for key, value in reference.items():
            expected = _OWNER_FIELDS.get(key)
            if expected is None:
                return f"{where}: unknown field {_shown(key)}"
            if value is not None and not isinstance(value, expected):
                return f"{where}.{key} must be a {'boolean' if expected is bool else 'string'}"
        # schema.FromAPIVersionAndKind: "group/version", or "version" alone.
        parts = str(reference.get("apiVersion") or "").split("/")
        group, version = ("", parts[0]) if len(parts) == 1 else (parts[0], parts[1])
        if len(parts) > 2:
            group, version = "", ""
        kind = str(reference.get("kind") or "")
        required = (
            ("apiVersion", "version", version),
            ("kind", "kind", kind),
            ("name", "name", reference.get("name")),
            ("uid", "uid", reference.get("uid")),
        )
        for key, said, value in required:
            if not value:
                return f"{where}.{key}: {said} must not be empty"
        if (group, version, kind) in _BANNED_OWNERS:
            return f"{where}: a {kind} of {version} is disallowed from being an owner"
        if reference.get("controller") is True:
            this = f"{printable(kind, _FIELD_LIMIT)}/{printable(reference['name'], _FIELD_LIMIT)}"
            if controller is not None:
                return (
                    f"only one reference can have controller set to true: found it in "
                    f"{controller} and {this}"
                )
            controller = this
    return None


class ObjectMeta(_Model):
    """A ServingStack's metadata: what a manifest may hold, and what the hub adds."""

    model_config = ConfigDict(extra="allow")

    # render works on one named object, so a name is required even where
    # the API server would make one from generateName.
    name: DnsSubdomain = Field(min_length=1, max_length=253)
    namespace: DnsLabel = Field(default="default", min_length=1, max_length=63)
    labels: dict[str, StrictStr] = Field(default_factory=dict)
    annotations: dict[str, StrictStr] = Field(default_factory=dict)
    finalizers: list[StrictStr] = Field(default_factory=list)
    generation: StrictInt | None = None

    @model_validator(mode="after")
    def _known_fields_only(self) -> ObjectMeta:
        for key, value in (self.model_extra or {}).items():
            expected = _META_EXTRAS.get(key)
            if expected is None:
                raise ValueError(f"unknown field {_shown(key)}")
            if not isinstance(value, expected) or isinstance(value, bool):
                raise ValueError(f"{key} must be a {expected.__name__}")
        problem = owner_references_problem((self.model_extra or {}).get("ownerReferences") or [])
        if problem:
            raise ValueError(problem)
        return self

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            problem = qualified_name_problem(key)
            if problem:
                raise ValueError(f"label key {_shown(key)} {problem}")
            if len(value) > 63 or (value and not _QUALIFIED_NAME.fullmatch(value)):
                raise ValueError(
                    f"label {_shown(key)}: the value must be empty or at most 63 letters, "
                    "digits, '-', '_' and '.', starting and ending with a letter or digit"
                )
        return labels

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, annotations: dict[str, str]) -> dict[str, str]:
        for key in annotations:
            problem = qualified_name_problem(key.lower())
            if problem:
                raise ValueError(f"annotation key {_shown(key)} {problem}")
        # Go's len(): bytes of UTF-8.
        size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
        if size > TOTAL_ANNOTATION_SIZE_LIMIT:
            raise ValueError(
                f"annotations are {size} bytes in all, over the API server's limit of "
                f"{TOTAL_ANNOTATION_SIZE_LIMIT} (256 KiB)"
            )
        return annotations

    @field_validator("finalizers")
    @classmethod
    def _finalizers(cls, finalizers: list[str]) -> list[str]:
        for finalizer in finalizers:
            problem = qualified_name_problem(finalizer)
            if problem:
                raise ValueError(f"finalizer {_shown(finalizer)} {problem}")
        if "orphan" in finalizers and "foregroundDeletion" in finalizers:
            raise ValueError("finalizers orphan and foregroundDeletion cannot both be set")
        return finalizers


class ServingStack(BaseModel):
    """A whole ServingStack object as read from a manifest or the hub."""

    model_config = ConfigDict(
        validate_by_alias=True, validate_by_name=False, extra="forbid", frozen=True
    )

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: ObjectMeta
    spec: ServingStackSpec
    status: ServingStackStatus | None = None

    @model_validator(mode="before")
    @classmethod
    def _check_type(cls, data: Any) -> Any:
        if isinstance(data, dict):
            expected = f"{API_GROUP}/{API_VERSION}"
            # What the file holds is shown cut and printable: it may be 200 KB
            # or carry a terminal escape.
            if data.get("apiVersion") != expected:
                got = printable(repr(data.get("apiVersion")), 80)
                raise ValueError(f"apiVersion must be {expected}, got {got}")
            if data.get("kind") != KIND:
                got = printable(repr(data.get("kind")), 80)
                raise ValueError(f"kind must be {KIND}, got {got}")
        return data
