"""Reading a revision Helm stored on the target: its values and its manifest.

Helm's Secret storage keeps each revision in a Secret (its name:
``observe.storage_name``) whose ``release`` key holds
base64 of gzip of the release as JSON (helm pkg/storage/driver/util.go,
encodeRelease; decodeRelease also takes JSON that is not gzipped); the API
server gives Secret data base64 again. The JSON carries ``config`` (the
values the release was given), ``manifest`` (what was rendered) and
``chart.metadata.version``.

A target's tenants can write such a Secret, so every step is bounded: the
base64 by its length before decoding, the gzip by what it may inflate to,
the JSON by ``untrusted.load_json``, which refuses it before parsing when
its parse would build more than ``MAX_RELEASE_BUILT`` (a Secret of 100 KiB
once decoded to 1.4 GiB: 60 MiB of ``{},`` compress to 80 KiB). Callers in
the operator decode in a worker thread. Only the Secret of the revision
``observe.state`` already took for the release is read: one Helm itself would
read, in the release's namespace, with labels that agree.
"""

from __future__ import annotations

from typing import Any

from modelplane.observe.state import Listed, release_of
from modelplane.observe.storage_name import storage_name
from modelplane.plan.diff import DeployedRelease
from modelplane.plan.observed import ObservedRelease
from modelplane.untrusted import Limits, UntrustedInputError, decode_base64, gunzip, load_json

# A Secret holds at most 1 MiB (etcd's default request limit is 1.5 MiB).
MAX_SECRET_BYTES = 1024 * 1024
# The release JSON holds the rendered manifest and the top chart's
# templates, files (its crds/ among them) and values, each file as base64;
# Go's encoding/json leaves a subchart out (``Chart.dependencies`` is not
# exported). The real charts' manifests are up to 1.8 MB of YAML
# (ai-gateway-crds-helm), their crds/ up to 1.5 MB (grove-charts): some
# 5 MB of JSON at most. A little over the 16 MiB a stored manifest may be
# (``plan.manifest.MANIFEST_LIMITS``), so that a manifest past its own
# limit is said as such. More is not a release Helm wrote.
MAX_RELEASE_BYTES = 24 * 1024 * 1024
# What parsing it may build, as ``untrusted.json_cost`` estimates it: a
# real release is mostly long strings, estimated at under twice its size;
# 24 MiB of ``{},`` is estimated at 2.5 GiB.
MAX_RELEASE_BUILT = 96 * 1024 * 1024
_RELEASE_LIMITS = Limits(max_bytes=MAX_RELEASE_BYTES, max_depth=128, max_built=MAX_RELEASE_BUILT)
_GZIP_MAGIC = b"\x1f\x8b"


class ReleaseReadError(ValueError):
    """A stored revision that cannot be read; the message names the Secret, never its text."""


def release_secret(listed: Listed, release: ObservedRelease) -> dict[str, Any] | None:
    """The Secret of exactly the revision ``release`` names, among those ``observe`` listed."""
    for secret in listed.release_secrets:
        found = release_of(secret)
        if (
            found is not None
            and found.name == release.name
            and found.namespace == release.namespace
            and found.revision == release.revision
        ):
            return secret
    return None


def stored_release(secret: dict[str, Any], where: str) -> dict[str, Any]:
    """Helm's release as JSON, from its storage Secret; ``where`` names the Secret in errors."""
    text = (secret.get("data") or {}).get("release")
    if not isinstance(text, str):
        raise ReleaseReadError(f"{where} holds no release")
    try:
        helm_text = decode_base64(text, MAX_SECRET_BYTES)
        data = decode_base64(helm_text, MAX_SECRET_BYTES)
        if data.startswith(_GZIP_MAGIC):
            data = gunzip(data, MAX_RELEASE_BYTES)
        doc = load_json(data, _RELEASE_LIMITS)
    except UntrustedInputError as err:
        raise ReleaseReadError(f"{where}: the stored release is unreadable: {err}") from None
    if not isinstance(doc, dict):
        raise ReleaseReadError(f"{where}: the stored release is not a JSON object")
    return doc


def helm_output_release(text: str) -> dict[str, Any]:
    """Helm's release as ``helm install/upgrade -o json`` prints it (the JSON it stores)."""
    try:
        doc = load_json(text, _RELEASE_LIMITS)
    except UntrustedInputError as err:
        raise ReleaseReadError(f"helm's output is not a release: {err}") from None
    if not isinstance(doc, dict):
        raise ReleaseReadError("helm's output is not a JSON object")
    return doc


def deployed_release(secret: dict[str, Any], release: ObservedRelease) -> DeployedRelease:
    """The values, manifest and chart version of the revision stored in ``secret``."""
    where = f"Secret {release.namespace}/{storage_name(release.name, release.revision)}"
    doc = stored_release(secret, where)
    config = doc.get("config")
    manifest = doc.get("manifest")
    chart = doc.get("chart")
    metadata = chart.get("metadata") if isinstance(chart, dict) else None
    version = metadata.get("version") if isinstance(metadata, dict) else None
    return DeployedRelease(
        name=release.name,
        namespace=release.namespace,
        revision=release.revision,
        chart_version=version if isinstance(version, str) else None,
        values=config if isinstance(config, dict) else {},
        manifest=manifest if isinstance(manifest, str) else "",
    )
