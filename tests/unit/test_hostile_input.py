"""Hostile and careless input: a clear refusal naming the file or field, never a traceback.

``render`` exits 2 with the file and the field in its message; the operator
reports InvalidSpec naming the field; a fetched manifest set holding anything
the catalog does not expect is refused whole. The API server's side of the
same verdicts is tests/integration/test_admission_parity.py.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError
from typer.testing import CliRunner

from modelplane.api.models import ServingStackSpec
from modelplane.cli import inputs
from modelplane.cli.main import app

from .conftest import manifest

UPSTREAM = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "upstream"


def _render(*args: str) -> Any:
    return CliRunner().invoke(app, ["render", *args])


def _refused(result: Any, *needles: str) -> str:
    """A refusal: status 2, nothing on stdout, a one-screen error, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.stdout == ""
    err = str(result.stderr)
    assert err.startswith("error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def _stack_file(tmp_path: Path, data: Any = None) -> Path:
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(manifest() if data is None else data))
    return path


# --- files that are not text, or not data ---------------------------------------

GOOD = yaml.safe_dump(manifest())

NOT_TEXT: dict[str, bytes] = {
    "stray-byte": GOOD.replace("west", "we\udcffst").encode("utf-8", "surrogateescape"),
    "utf-16-with-bom": GOOD.encode("utf-16"),
    "utf-16-be-with-bom": b"\xfe\xff" + GOOD.encode("utf-16-be"),
    "random-bytes": bytes(range(256)) * 8,
    "latin-1": GOOD.replace("west", "w\u00e9st").encode("latin-1"),
}
DEEP: dict[str, str] = {
    "flow-lists": "[" * 5000 + "]" * 5000,
    "flow-maps": "{a: " * 3000 + "1" + "}" * 3000,
    "block-maps": "".join(f"{'  ' * i}k:\n" for i in range(2000)) + "  " * 2000 + "v\n",
    "deep-in-spec": GOOD + "  gateway: " + "[" * 4000 + "]" * 4000 + "\n",
}


@pytest.mark.parametrize("name", sorted(NOT_TEXT))
@pytest.mark.parametrize("flag", ["-f", "--observed"])
def test_a_file_that_is_not_utf8_text_is_refused(tmp_path: Path, name: str, flag: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(NOT_TEXT[name])
    args = ["-f", str(bad)] if flag == "-f" else ["-f", str(_stack_file(tmp_path)), flag, str(bad)]
    err = _refused(_render(*args), str(bad))
    assert "UTF-16" in err if "utf-16" in name else "not UTF-8 text" in err


def test_a_stray_byte_is_located(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(NOT_TEXT["stray-byte"])
    line = GOOD[: GOOD.index("west")].count("\n") + 1
    _refused(_render("-f", str(bad)), "byte 0xff", f"(line {line})")


@pytest.mark.parametrize("name", sorted(DEEP))
@pytest.mark.parametrize("flag", ["-f", "--observed"])
def test_yaml_nested_thousands_deep_is_refused(tmp_path: Path, name: str, flag: str) -> None:
    bad = tmp_path / "deep.yaml"
    bad.write_text(DEEP[name])
    args = ["-f", str(bad)] if flag == "-f" else ["-f", str(_stack_file(tmp_path)), flag, str(bad)]
    _refused(_render(*args), str(bad), "nested deeper than")


def test_a_file_larger_than_any_input_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inputs, "MAX_INPUT_BYTES", 1024 * 1024)
    big = tmp_path / "big.yaml"
    big.write_text(GOOD + "#" * (1024 * 1024) + "\n")
    _refused(_render("-f", str(big)), str(big), "larger than 1 MiB")


def test_a_key_given_twice_is_refused_not_silently_the_last(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(GOOD + "  nvidiaDriverRoot: /\n  nvidiaDriverRoot: /opt/nvidia\n")
    _refused(_render("-f", str(path)), str(path), "'nvidiaDriverRoot' a second time", "line ")
    # A key that overrides one a merge key brings is not a key given twice.
    path.write_text(
        GOOD.replace("spec:\n", "spec:\n  gateway:\n    <<: {className: eg}\n    className: gw\n")
    )
    assert _render("-f", str(path)).exit_code == 0


def test_a_key_that_is_not_a_string_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(GOOD + "  1: one\n  true: yes\n")
    _refused(_render("-f", str(path)), "not a string")


def test_a_date_stays_a_string_as_kubectl_sends_it(tmp_path: Path) -> None:
    # Unquoted, PyYAML would make a date of it and the models would refuse a
    # key the API server accepts.
    path = tmp_path / "date.yaml"
    path.write_text(GOOD.replace("key: kubeconfig", "key: 2024-01-01"))
    result = _render("-f", str(path), "-o", "json")
    assert result.exit_code == 0, result.output


def test_unknown_keys_cannot_write_to_the_terminal(tmp_path: Path) -> None:
    path = _stack_file(tmp_path, manifest(**{"\x1b[2Jclear": 1}))
    err = _refused(_render("-f", str(path)))
    assert "\x1b" not in err
    assert "'\\x1b[2Jclear'" in err


def test_a_flood_of_errors_is_cut_short(tmp_path: Path) -> None:
    path = _stack_file(tmp_path, manifest(**{f"field{i}": i for i in range(500)}))
    err = _refused(_render("-f", str(path)), "and 480 more errors")
    assert err.count("\n") < 30


# --- wire names only ---------------------------------------------------------------


def _renamed(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted wire path of the parent, python name) of every field whose wire name differs."""
    for name, field in model.model_fields.items():
        alias = field.alias or name
        if alias != name:
            yield prefix, name
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _renamed(annotation, f"{prefix}.{alias}".lstrip("."))


RENAMED = sorted(_renamed(ServingStackSpec))


@pytest.mark.parametrize(("parent", "name"), RENAMED, ids=[f"{p}.{n}" for p, n in RENAMED])
def test_a_python_field_name_is_refused_as_the_api_server_does(
    tmp_path: Path, parent: str, name: str
) -> None:
    spec: dict[str, Any] = {"secrets": [{"type": "Kubeconfig", "name": "kc", "key": "k"}]}
    node = spec
    for part in filter(None, parent.split(".")):
        node = node.setdefault(part, {})
    field = (
        ServingStackSpec.model_fields[name] if not parent else _model_at(parent).model_fields[name]
    )
    node[name] = copy.deepcopy(field.get_default(call_default_factory=True))
    with pytest.raises(ValidationError):
        ServingStackSpec.model_validate(spec)
    path = _stack_file(tmp_path, manifest(**{k: v for k, v in spec.items() if k != "secrets"}))
    wire = f"spec.{parent}.{name}".replace("..", ".")
    _refused(_render("-f", str(path)), f"{wire}: unknown field; the field is written {field.alias}")


def _model_at(dotted: str) -> type[BaseModel]:
    model: type[BaseModel] = ServingStackSpec
    for part in dotted.split("."):
        field = next(f for n, f in model.model_fields.items() if (f.alias or n) == part)
        assert isinstance(field.annotation, type)
        model = field.annotation
    return model
