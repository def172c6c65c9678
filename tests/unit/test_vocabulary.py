"""Every condition type, reason and event reason comes from ``modelplane.vocabulary``.

Users match on these words (``kubectl wait``, alert rules, scripts), so each
is declared once: the source is read with ``ast`` for a writer that spells
one out, and docs/status.md is held to list exactly the vocabulary.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from modelplane import vocabulary
from modelplane.faults import ErrorKind, Fault
from modelplane.plan import decisions
from modelplane.vocabulary import (
    CONDITION_REASONS,
    READY_MIRRORS,
    BlockedReason,
    ConditionType,
    EventReason,
    IdentityFailure,
)

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "modelplane"
STATUS_DOC = ROOT / "docs" / "status.md"

# Where a word is written, as (callee, positional indexes, keywords): the
# condition builder, the event emitters, and the values that carry a reason
# to one of them.
SINKS: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
    # operator.status.condition(type_, ok, reason, message, generation)
    "condition": ((0, 2), ("type_", "reason")),
    # an Emit: (type, reason, message)
    "emit": ((1,), ("reason",)),
    # operator.hub_writes.event(body, type_, reason, message), kopf.event(reason=)
    "event": ((2,), ("reason",)),
    "teardown_condition": ((2,), ("reason",)),
    "Outcome": ((), ("blocked_reason",)),
    "Blocked": ((0,), ("reason",)),
    "NotServing": ((), ("reason",)),
    "GpuAvailability": ((), ("reason",)),
    "ComponentHealth": ((), ("reason",)),
    "Health": ((), ("reason",)),
    # plan.rollout.Verdict (other Verdicts, an HTTP answer's, take theirs by position).
    "Verdict": ((), ("reason",)),
}
# A condition written as a dict: the keys that make one.
CONDITION_KEYS = {"type", "status", "reason"}


@dataclass(frozen=True)
class Finding:
    where: str
    what: str


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """The module's top-level names bound to a string literal."""
    out: dict[str, str] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            out.update({t.id: value.value for t in targets if isinstance(t, ast.Name)})
    return out


def _spelled_out(node: ast.expr, constants: dict[str, str]) -> str | None:
    """What a word written here spells out itself, rather than naming the vocabulary's."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return repr(node.value)
    if isinstance(node, ast.JoinedStr):
        return "an f-string"
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return "a string built at run time"
    if isinstance(node, ast.Name) and node.id in constants:
        return f"{node.id} = {constants[node.id]!r}"
    return None


def _written(call: ast.Call) -> Iterator[ast.expr]:
    positions, keywords = SINKS.get(_callee(call), ((), ()))
    yield from (call.args[i] for i in positions if i < len(call.args))
    yield from (k.value for k in call.keywords if k.arg in keywords)


def literal_words(source: str, name: str = "<source>") -> list[Finding]:
    """Every condition type, reason or event reason ``source`` writes as a literal."""
    tree = ast.parse(source, name)
    constants = _string_constants(tree)
    out: list[Finding] = []
    for node in ast.walk(tree):
        written: list[ast.expr] = []
        if isinstance(node, ast.Call):
            written = list(_written(node))
        elif isinstance(node, ast.Dict):
            keys = {
                k.value: v
                for k, v in zip(node.keys, node.values, strict=True)
                if k is not None and isinstance(k, ast.Constant)
            }
            if set(keys) >= CONDITION_KEYS:
                written = [keys["type"], keys["reason"]]
        for value in written:
            what = _spelled_out(value, constants)
            if what is not None:
                out.append(Finding(f"{name}:{value.lineno}", what))
    return out


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if p != SRC / "vocabulary.py")


def _words() -> set[str]:
    enums = (ConditionType, EventReason, *vocabulary.ConditionReason.__args__)
    return {m.value for e in enums for m in e}


def test_no_writer_spells_out_a_condition_or_reason() -> None:
    found = [
        f"{f.where}: {f.what}"
        for path in _sources()
        for f in literal_words(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == [], "name the word from modelplane.vocabulary instead"


def test_no_module_keeps_its_own_copy_of_a_word() -> None:
    # A constant spelled out elsewhere (READY = "Ready") would let a writer
    # pass the check above by name.
    words = _words()
    copies = [
        f"{path.relative_to(ROOT)}: {name} = {value!r}"
        for path in _sources()
        for name, value in _string_constants(ast.parse(path.read_text())).items()
        if value in words
    ]
    assert copies == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('self.emit("Warning", "CRDKept", m)\n', ["'CRDKept'"]),
        ('emit("Normal", f"{verb}Succeeded", m)\n', ["an f-string"]),
        ('X = "Y"\nevent(body, "Warning", X, m)\n', ["X = 'Y'"]),
        ('kopf.event(body, type="Warning", reason="A", message=m)\n', ["'A'"]),
        ('condition("Ready", True, "Reconciled", m, 1)\n', ["'Ready'", "'Reconciled'"]),
        ('Outcome(blocked_reason="X")\n', ["'X'"]),
        ('NotServing(reason="A" + b, message=m)\n', ["a string built at run time"]),
        ('c = {"type": "Ready", "status": "True", "reason": r}\n', ["'Ready'"]),
        ("condition(ConditionType.READY, True, ReadyReason.RECONCILED, m, 1)\n", []),
        ('self.emit("Warning", EventReason.CRD_KEPT, m)\n', []),
        # The event's type (Warning, Normal) is not a reason.
        ('emit("Warning", reason, "a message")\n', []),
        # A dict that is not a condition (an API Status) is not one of ours.
        ('{"kind": "Status", "reason": "NotAStatus"}\n', []),
    ],
)
def test_the_scan_finds_each_way_of_spelling_a_word_out(source: str, found: list[str]) -> None:
    assert [f.what for f in literal_words(source)] == found


# ---- the vocabulary's own rules ----------------------------------------------------------


def test_an_identity_failure_is_a_blocked_reason() -> None:
    assert {f.value for f in IdentityFailure} <= {r.value for r in BlockedReason}


def test_every_condition_has_its_reasons_declared() -> None:
    assert set(CONDITION_REASONS) == set(ConditionType)
    assert all(CONDITION_REASONS.values())


def test_every_event_a_blocked_reason_makes_is_an_event_reason() -> None:
    # component_failures and the reconciler emit these as events.
    given = {decisions.action_reason(Fault(kind)) for kind in ErrorKind}
    given.add(decisions.blocked_reason(Fault(ErrorKind.OVER_BUDGET)))
    assert given <= set(EventReason)


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_every_reason_a_fault_gives_is_declared_for_its_condition(kind: ErrorKind) -> None:
    fault = Fault(kind)
    assert decisions.blocked_reason(fault) in CONDITION_REASONS[ConditionType.READY]
    teardown = decisions.blocked_reason(fault, teardown=True)
    assert teardown in CONDITION_REASONS[ConditionType.TEARDOWN]


# ---- docs/status.md ------------------------------------------------------------------------

NAME = re.compile(r"[A-Z][A-Za-z]+")


def _tables(path: Path) -> dict[str, list[list[Token]]]:
    """Each table's rows (a row is its cells' inline tokens), by the heading above it."""
    tokens = MarkdownIt("commonmark").enable("table").parse(path.read_text())
    out: dict[str, list[list[Token]]] = {}
    heading = ""
    row: list[Token] | None = None
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            heading = tokens[i + 1].content
        elif token.type == "tr_open":
            row = []
        elif token.type == "inline" and row is not None:
            row.append(token)
        elif token.type == "tr_close" and row is not None:
            out.setdefault(heading, []).append(row)
            row = None
    return {h: rows[1:] for h, rows in out.items()}  # less the header row


def _names(cell: Token) -> list[str]:
    return [
        c.content
        for c in cell.children or []
        if c.type == "code_inline" and NAME.fullmatch(c.content)
    ]


def test_the_conditions_table_lists_every_condition_with_its_own_reasons() -> None:
    rows = _tables(STATUS_DOC)["Conditions"]
    listed = {_names(row[0])[0]: row for row in rows}
    assert set(listed) == set(ConditionType)
    for name, row in listed.items():
        said = {n for cell in row[1:] for n in _names(cell)}
        assert said <= CONDITION_REASONS[ConditionType(name)], name


def _written_to() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for condition, reasons in CONDITION_REASONS.items():
        # Reconciling and Stalled carry Ready's reason: the page says so once.
        if condition in READY_MIRRORS:
            continue
        for reason in reasons:
            out.setdefault(reason, set()).add(condition)
    for reason in EventReason:
        out.setdefault(reason, set()).add("event")
    return out


def test_every_reason_is_listed_once_where_it_is_written() -> None:
    rows = _tables(STATUS_DOC)["Every reason"]
    listed: dict[str, set[str]] = {}
    for row in rows:
        [reason] = _names(row[0])
        assert reason not in listed, f"{reason} is listed twice"
        where = set(_names(row[1])) | ({"event"} if "event" in row[1].content else set())
        listed[reason] = where
    assert listed == _written_to()
