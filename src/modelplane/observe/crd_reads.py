"""The CRD watch's answers parsed for what its outlines keep, and nothing else.

A real Standard target's CRDs are 6.2 MB of JSON, nearly all of it their
schemas, and the watch keeps a few hundred bytes of each
(``crd_outline.crd_outline``). Parsed whole, every LIST of them built tens of
MB of objects only to drop them, on every target of the shard at once when
it starts, and the process kept the peak. These types name what the
outline reads, so the parse reads past the rest without building it.

One type serves a LIST's page (``metadata``, ``items``) and a watch's event
(``type``, ``object``), the Status of an ERROR event included (``code``). An
answer of another shape is parsed whole (``untrusted.load_json_as``), and
outlined as before.
"""

from __future__ import annotations

from typing import Any

import msgspec

from modelplane.untrusted import Limits, load_json_as
from modelplane.wire import DIGEST_ANNOTATION


class _Annotations(msgspec.Struct, omit_defaults=True):
    digest: Any = msgspec.field(name=DIGEST_ANNOTATION, default=None)


class _Metadata(msgspec.Struct, omit_defaults=True):
    name: Any = None
    namespace: Any = None
    resourceVersion: Any = None
    labels: Any = None
    annotations: _Annotations | None = None


class _Version(msgspec.Struct, omit_defaults=True):
    name: Any = None
    served: Any = None
    storage: Any = None


class _Spec(msgspec.Struct, omit_defaults=True):
    group: Any = None
    names: Any = None
    scope: Any = None
    versions: list[_Version] | None = None


class _Condition(msgspec.Struct, omit_defaults=True):
    type: Any = None
    status: Any = None


class _Status(msgspec.Struct, omit_defaults=True):
    conditions: list[_Condition] | None = None


class _Crd(msgspec.Struct, omit_defaults=True):
    metadata: _Metadata | None = None
    spec: _Spec | None = None
    status: _Status | None = None
    code: Any = None


class _Answer(msgspec.Struct, omit_defaults=True):
    metadata: Any = None
    items: list[_Crd] | None = None
    type: Any = None
    object: _Crd | None = None


_DECODER = msgspec.json.Decoder(_Answer)


def decode_crds(text: bytes, limits: Limits) -> Any:
    """A CRD LIST's page or watch event, within ``limits``, with only what an outline reads."""
    return load_json_as(text, limits, _DECODER)
