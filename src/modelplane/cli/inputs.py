"""Reading user files into models, with errors that name the file and the field.

Whatever a file holds (bytes that are not UTF-8, YAML nested thousands deep,
keys written twice, a snake_case field name), the outcome is an ``InputError``
whose message a person can act on, never a traceback.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from yaml.nodes import MappingNode, ScalarNode

from modelplane.untrusted import (
    BoundedLoader,
    Limits,
    UntrustedInputError,
    load_yaml_all,
    printable,
)

M = TypeVar("M", bound=BaseModel)

# Far above any spec (the API server refuses request bodies over 3 MiB) or
# facts file; it keeps /dev/zero or a stray disk image from filling memory.
MAX_INPUT_BYTES = 16 * 1024 * 1024
# A spec is six levels deep and a facts file about as many. PyYAML composes
# nodes recursively, so without a limit a few thousand "[" exhaust the stack.
MAX_DEPTH = 64
# Nodes once aliases are expanded: a facts file of a large cluster holds a
# few hundred thousand; an alias bomb of a few hundred bytes, billions.
MAX_NODES = 2_000_000
_LIMITS = Limits(max_bytes=MAX_INPUT_BYTES, max_depth=MAX_DEPTH, max_nodes=MAX_NODES)
# One line per error; past this many the file is not worth reading line by line.
MAX_ERRORS = 20

_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


class InputError(Exception):
    """Bad input: the message says which file and which field."""


class _Loader(BoundedLoader):
    """YAML as kubectl reads it, as far as a verdict can depend on it.

    Timestamps stay strings (kubectl sends ``2024-01-01`` as a string; PyYAML
    would make it a date the models refuse), a key given twice is an error
    (kubectl refuses it; PyYAML silently keeps the last). Bytes, nesting and
    aliases are bounded by ``BoundedLoader``.
    """

    limits = _LIMITS

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            if not isinstance(key, str):
                # Every key either file holds is a string; 1 and true would
                # also fold into one Python key.
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found key {_quoted(key_node.value)}, which is not a string (quote it)",
                    key_node.start_mark,
                )
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found key {_quoted(key)} a second time",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _decode(path: Path, data: bytes) -> str:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            raise InputError(
                f"{path}: the file is {encoding} text (it starts with a {encoding} byte order "
                "mark); save it as UTF-8"
            )
    try:
        # A UTF-8 byte order mark is harmless; kubectl skips it too.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise InputError(
            f"{path}: not UTF-8 text: byte 0x{data[err.start]:02x} at offset {err.start} "
            f"(line {line}) is not valid UTF-8"
        ) from None


def load_yaml(path: Path) -> Any:
    """The one YAML document in ``path``, or None if it holds none.

    Read as kubectl reads a file: empty documents (a trailing ``---``, a
    comment alone) are skipped; two documents with content are an error,
    since render takes one object.
    """
    try:
        with path.open("rb") as f:
            data = f.read(MAX_INPUT_BYTES + 1)
    except OSError as err:
        raise InputError(f"{path}: {err.strerror or err}") from err
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"{path}: larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB")
    text = _decode(path, data)
    try:
        docs = [d for d in load_yaml_all(text, _LIMITS, loader_class=_Loader) if d is not None]
    except UntrustedInputError as err:
        # Its message names the problem and where, never the file's text.
        raise InputError(f"{path}: not valid YAML: {str(err).removeprefix('not YAML: ')}") from None
    if len(docs) > 1:
        raise InputError(
            f"{path}: holds {len(docs)} YAML documents; expected one {_expected(docs[0])} document"
        )
    return docs[0] if docs else None


def _expected(doc: Any) -> str:
    kind = doc.get("kind") if isinstance(doc, dict) else None
    return _show(kind) if isinstance(kind, str) else "object's"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _wire_name(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """The wire name of the field ``loc`` names by its Python name, if it does."""
    current = [model]
    for part in loc[:-1]:
        if isinstance(part, int):
            continue  # an index into a list: the same models
        current = [
            inner
            for m in current
            for name, field in m.model_fields.items()
            if (field.alias or name) == part
            for inner in _models_in(field.annotation)
        ]
    last = loc[-1] if loc else None
    for m in current:
        field = m.model_fields.get(str(last))
        if field is not None and field.alias and field.alias != last:
            return field.alias
    return None


def _quoted(text: object) -> str:
    return repr(printable(text, 64))


def _show(part: object) -> str:
    # A key from the file is printed as itself only when it cannot carry a
    # terminal escape or a line break into the message.
    text = str(part)
    if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", text):
        return text
    return repr(text[:64]) + ("..." if len(text) > 64 else "")


def describe(err: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    lines = []
    errors = err.errors()
    for e in errors[:MAX_ERRORS]:
        loc = ".".join(_show(p) for p in e["loc"])
        path = f"{prefix}.{loc}" if prefix and loc else (prefix or loc)
        msg = e["msg"].removeprefix("Value error, ")
        wire = _wire_name(model, tuple(e["loc"])) if model is not None else None
        if e["type"] == "extra_forbidden" and wire is not None:
            # Accepting the Python name would let render pass what the API
            # server refuses; saying the wire name makes the fix obvious.
            msg = f"unknown field; the field is written {wire}"
        lines.append(f"{path}: {msg}" if path else msg)
    if len(errors) > MAX_ERRORS:
        lines.append(f"... and {len(errors) - MAX_ERRORS} more errors")
    return "\n".join(lines)


def parse(model: type[M], data: Any, source: str) -> M:
    if data is None:
        raise InputError(f"{source}: the file is empty; expected a {model.__name__} document")
    if not isinstance(data, dict):
        raise InputError(
            f"{source}: expected a {model.__name__} mapping, got {type(data).__name__}"
        )
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise InputError(
            f"{source}: invalid {model.__name__}:\n{describe(err, model=model)}"
        ) from err
    except RecursionError:
        raise InputError(f"{source}: invalid {model.__name__}: nested too deeply") from None
