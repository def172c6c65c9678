"""Reading user files into models, with errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class InputError(Exception):
    """Bad input: the message says which file and which field."""


def load_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as err:
        raise InputError(f"{path}: {err.strerror or err}") from err
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not valid YAML: {err}") from err


def describe(err: ValidationError, prefix: str = "") -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        path = f"{prefix}.{loc}" if prefix and loc else (prefix or loc)
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{path}: {msg}" if path else msg)
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
        raise InputError(f"{source}: invalid {model.__name__}:\n{describe(err)}") from err
