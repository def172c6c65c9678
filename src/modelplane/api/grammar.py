"""The string grammars of the ServingStack's fields, and the types that carry them.

Each grammar is written once and used twice: by the models (Python ``re``)
and, through the generated CRD, by the API server (Go's RE2, which reads the
ECMA-262 subset OpenAPI asks for). So every pattern stays in what the three
share: anchored with ^...$ (Go searches, Python is asked to fullmatch, and a
trailing newline matches neither), ASCII classes spelled out instead of \\d or
\\w (Python's \\d matches any Unicode digit), no lookaround, no backreferences.
No pattern matches one string in more than one way (a path segment is
leading dots, one non-dot, then anything), so Python's backtracking stays
short: tens of microseconds at each field's maximum length.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError


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
# One CERTIFICATE block of a value CERTIFICATE_PEM admits.
PEM_BLOCK = re.compile(_PEM_CERTIFICATE)
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

# A duration as Kubernetes fields write one (Go's time.ParseDuration, as
# metav1.Duration reads it), cut to what a wait needs: whole hours, minutes
# and seconds in that order, each at most once ("10m", "1h30m", "0s"). Each
# part ends in its own letter, so a string matches in one way only.
DURATION = Grammar(
    "^([0-9]{1,4}h)?([0-9]{1,5}m)?([0-9]{1,7}s)?$",
    "must be a duration of whole hours, minutes and seconds such as 10m, 1h30m or 0s",
)
_DURATION_UNITS = {"h": 3600, "m": 60, "s": 1}


def duration_seconds(text: str) -> int:
    """The seconds a ``DURATION`` string says; 0 for one that says none."""
    return sum(int(n) * _DURATION_UNITS[unit] for n, unit in re.findall("([0-9]+)([hms])", text))


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
# At least one part: an empty string would say no duration at all.
Duration = Annotated[
    str,
    Field(min_length=2, max_length=19, json_schema_extra=DURATION.schema),
    AfterValidator(DURATION.check),
]
