"""The ServingStack's spec: what one target cluster should serve.

The version pins (``Versions``, ``StandardVersions``, ``DynamoVersions``) are
made from the catalog: each component's record names its field, description
and default, so a version string is written once, in its component's module.
Cross-field rules that a structural schema cannot express are validators
here and CEL rules in the CRD (``api.crd``), with the same messages.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from cryptography import x509
from pydantic import (
    BeforeValidator,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from modelplane import pins
from modelplane.api.base import ApiModel
from modelplane.api.grammar import (
    CERTIFICATE_PEM,
    PEM_BLOCK,
    PRIVATE_KEY_MARK,
    DnsSubdomain,
    Duration,
    Hostname,
    HostPath,
    ImageTag,
    SecretKey,
    SecretNamespace,
    VersionPin,
    duration_seconds,
)
from modelplane.catalog.components import COMPONENTS
from modelplane.catalog.types import Component
from modelplane.pins import ComponentsMode, Stack
from modelplane.untrusted import printable


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
ADOPT_RULE = "adopt must name each component once"
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


class SecretRef(ApiModel):
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


class Listener(ApiModel):
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


class ClientCA(ApiModel):
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
        for index, block in enumerate(PEM_BLOCK.finditer(value), 1):
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
            for block in PEM_BLOCK.finditer(self.certificate)
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


class GatewaySpec(ApiModel):
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


class _Pins(ApiModel):
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


# How long the DRA driver's uninstall waits for the pods that hold its claims
# (spec.claimWaitTimeout): long enough for a serving pod's grace period and
# a drain, short enough that a forgotten pod does not hold a deletion for hours.
CLAIM_WAIT_TIMEOUT = "10m"


# What spec.adopt may name: the components installed as a Helm release,
# whose objects Helm's --take-ownership can take over (plan.conflicts).
ADOPTABLE: tuple[str, ...] = tuple(sorted(c.name for c in COMPONENTS if c.chart is not None))
if TYPE_CHECKING:
    AdoptableComponent = str
else:
    AdoptableComponent = Literal[ADOPTABLE]


class ServingStackSpec(ApiModel):
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
    # Not in the upstream API reference: an extension, as spec.components is.
    adopt: list[AdoptableComponent] = Field(
        default_factory=list,
        max_length=len(ADOPTABLE),
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Managed mode: components allowed to take over the objects of their "
        "release that already exist on the cluster and belong to no release of this product "
        "(Helm's --take-ownership), instead of being held back. modelplane diff lists what "
        "each would take over. A CRD of another owner and a second instance of a component "
        "are never taken over.",
    )
    # Not in the upstream API reference either: an extension, as adopt is.
    claim_wait_timeout: Duration = Field(
        default=CLAIM_WAIT_TIMEOUT,
        description="Managed mode: how long the NVIDIA DRA driver's release waits before it "
        "is uninstalled (by deleting this ServingStack, or by a reinstall) while pods hold "
        "ResourceClaims the driver allocated; a pod whose claim is released with no driver "
        "left to unprepare it stays Terminating. Once it has passed, the uninstall goes on "
        "and a Warning event says so. Whole hours, minutes and seconds, such as 10m or "
        "1h30m; 0s does not wait.",
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

    @field_validator("adopt")
    @classmethod
    def _adopt_once(cls, adopt: list[str]) -> list[str]:
        if len(adopt) != len(set(adopt)):
            raise ValueError(ADOPT_RULE)
        return adopt

    @property
    def claim_wait_seconds(self) -> int:
        return duration_seconds(self.claim_wait_timeout)

    @property
    def kubeconfig_secret(self) -> SecretRef:
        return next(s for s in self.secrets if s.type is SecretType.KUBECONFIG)

    @property
    def cloud_identity(self) -> SecretRef | None:
        return next((s for s in self.secrets if s.type is not SecretType.KUBECONFIG), None)
