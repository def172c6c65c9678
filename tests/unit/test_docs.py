"""The README and docs/ hold together and match the code.

Docs go stale in a few ways a reader cannot see from one page: a link to a
heading that was renamed or moved, a page nothing links to, a generated page
not regenerated, a path or a chart value that no longer exists, and above all
a flag renamed in the code and not in the text. Each is checked here,
offline, from the Markdown as a CommonMark parser reads it (so a ``--flag``
or a ``#`` inside a code block is never taken for prose or a heading).
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from markdown_it import MarkdownIt
from markdown_it.token import Token

from modelplane.catalog.reference import requirements_markdown
from modelplane.cli.main import app
from modelplane.plan.decisions import BlockedReason

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

# Flags of other programs the docs show (helm, kubectl, the clouds' CLIs, the
# test environment, the benchmarks, setup), where no command line names the
# program: each is listed on purpose, so a modelplane flag renamed in the code
# cannot hide among them.
FOREIGN_FLAGS = {
    "--create-namespace",  # helm
    "--set",  # helm
    "--install",  # helm upgrade --install
    "--take-ownership",  # helm upgrade
    "--wait",  # helm install --wait (and `modelplane apply --wait`)
    "--for",  # kubectl wait --for=condition=Ready
    "--type",  # kubectl patch --type json
    "--strict",  # mypy
    "--fresh",  # hack/setup.sh
    "--relock",  # hack/setup.sh
    "--image",  # hack/test-deps.sh
    "--nodes",  # python -m tests.testenv start
    "--crds",  # python -m tests.testenv start
    "--gateway-controllers",  # python -m tests.testenv start
    "--stacks",  # bench/bench_fleet.py
    "--real",  # bench/bench_fleet.py
    "--window",  # bench/bench_fleet.py
    "--targets",  # bench/bench_fleet_healthy.py, bench/bench_target_memory.py
    "--shards",  # bench/bench_fleet_healthy.py
    "--settle",  # bench/bench_fleet_healthy.py
    "--trace",  # bench/bench_target_memory.py
    "--before",  # bench/bench_settled_shard.py
    "--small",  # bench/bench_managed_fleet.py
    "--watches",  # bench/bench_watch_chain.py
    "--stagger",  # bench/bench_fleet_healthy.py
    "--census",  # bench/bench_shard_memory.py
    "--steps",  # bench/bench_shard_memory.py
    "--gc",  # bench/bench_shard_memory.py
    "--ready-timeout",  # bench/bench_fleet_healthy.py
    "--outage",  # bench/bench_watch_cut.py
    "--variant",  # mmdebstrap
    "--network",  # podman run
    "--require-hashes",  # pip install (the Dockerfile)
    "--only-binary",  # pip install (the Dockerfile)
    "--no-index",  # pip install (the Dockerfile)
    "--no-deps",  # pip install (the Dockerfile)
    "--no-build-isolation",  # pip install (the Dockerfile)
    "--build-arg",  # docker build
}

# A flag where it stands, not a part of a word (`mp-modelplane`) or a range.
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
# A path in the repository, as a whole code span names one.
REPO_PATH = re.compile(r"(?:src|tests|bench|hack|deploy|examples|docs|\.ci)/[\w./*-]*|Dockerfile")


@dataclass
class Page:
    """What one Markdown file says, as a CommonMark parser reads it."""

    path: Path
    anchors: set[str] = field(default_factory=set)
    links: list[str] = field(default_factory=list)
    code_spans: list[str] = field(default_factory=list)
    code_blocks: list[str] = field(default_factory=list)
    prose: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.path.relative_to(ROOT))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: lowercase, punctuation gone, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _plain(inline: Token) -> str:
    return "".join(c.content for c in inline.children or [] if c.type in ("text", "code_inline"))


@cache
def read(path: Path) -> Page:
    page = Page(path)
    # CommonMark with GitHub's tables, whose cells split at a bare `|` as GitHub does.
    tokens = MarkdownIt("commonmark").enable("table").parse(path.read_text())
    seen: Counter[str] = Counter()
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            base = slug(_plain(tokens[i + 1]))
            # GitHub numbers a repeated heading's anchor: x, x-1, x-2.
            page.anchors.add(f"{base}-{seen[base]}" if seen[base] else base)
            seen[base] += 1
        elif token.type in ("fence", "code_block"):
            page.code_blocks.append(token.content)
        elif token.type == "inline":
            for child in token.children or []:
                if child.type == "link_open":
                    page.links.append(str(child.attrs["href"]))
                elif child.type == "code_inline":
                    page.code_spans.append(child.content)
                elif child.type == "text":
                    page.prose.append(child.content)
    return page


def _target(page: Page, link: str) -> tuple[Path, str]:
    path, _, anchor = link.partition("#")
    return ((page.path.parent / path).resolve() if path else page.path), anchor


def _relative_links(page: Page) -> list[str]:
    return [link for link in page.links if not re.match(r"[a-z][a-z0-9+.-]*:", link)]


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    page = read(path)
    broken = []
    for link in _relative_links(page):
        target, anchor = _target(page, link)
        if not target.exists():
            broken.append(f"{link}: no {target.relative_to(ROOT)}")
        elif anchor and target.suffix == ".md" and anchor not in read(target).anchors:
            broken.append(f"{link}: {target.relative_to(ROOT)} has no heading #{anchor}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = read(README)
    linked = {_target(readme, link)[0] for link in _relative_links(readme)}
    unlinked = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert not unlinked, f"README.md links no {unlinked}: add them to its Documentation table"


def test_the_link_check_sees_a_broken_anchor() -> None:
    # The checker itself: GitHub's anchors, and a link to a missing one is caught.
    assert slug("Security: what a tenant and a hub user can and cannot do") == (
        "security-what-a-tenant-and-a-hub-user-can-and-cannot-do"
    )
    assert slug("The substrate charts' CRDs") == "the-substrate-charts-crds"
    assert "the-substrate-charts-crds" in read(DOCS / "upgrading.md").anchors
    assert "no-such-heading" not in read(DOCS / "upgrading.md").anchors


def test_the_readme_keeps_the_two_commands_ci_runs() -> None:
    # The README's first block is what a newcomer runs, and .ci/run runs the same.
    first = next(b for b in read(README).code_blocks)
    setup, tests = first.strip().splitlines()
    ci = (ROOT / ".ci" / "run").read_text()
    assert setup.startswith("bash hack/setup.sh") and "bash hack/setup.sh" in ci
    assert tests == ".venv/bin/python -m pytest" and tests in ci.splitlines()


def test_the_requirements_page_is_generated_from_the_catalog() -> None:
    assert (DOCS / "requirements.md").read_text() == requirements_markdown(), (
        "docs/requirements.md is stale: run hack/catalog-docs.sh"
    )


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_code_span_names_exists(path: Path) -> None:
    missing = [
        span
        for span in read(path).code_spans
        if REPO_PATH.fullmatch(span) and not any(ROOT.glob(span.rstrip("/")))
    ]
    assert not missing, f"{read(path).name} names paths that do not exist: {missing}"


def _option_names(command: Any) -> set[str]:
    names: set[str] = set()
    for param in command.params:
        if param.param_type_name == "option":
            names.update(param.opts, param.secondary_opts)
    return names


@cache
def cli_options() -> dict[str, frozenset[str]]:
    """Each ``modelplane`` command's option names, from the command tree typer builds."""
    group: Any = typer.main.get_command(app)
    return {name: frozenset(_option_names(cmd)) for name, cmd in group.commands.items()}


def _segments(text: str) -> list[str]:
    """Shell command lines of a block or span: continuations joined, comments and pipes cut."""
    lines: list[str] = []
    for line in text.replace("\\\n", " ").splitlines():
        # An indented line goes on the one before: a synopsis's second line
        # (`modelplane check ...` then `    [--identity-type ...]`).
        if lines and line[:1].isspace() and line.strip():
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    out = []
    for line in lines:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        # `a | b`, `a && b`: each side is its own command.
        current: list[str] = []
        for word in words:
            if word in ("|", "&&", "||", ";"):
                out.append(" ".join(current))
                current = []
            else:
                current.append(word)
        out.append(" ".join(current))
    return [s for s in out if s]


def _modelplane_invocation(segment: str, *, bare: bool) -> tuple[str, list[str]] | None:
    """(command, flags) of a ``modelplane CMD ...`` line; with ``bare``, ``CMD --x`` too."""
    words = segment.split()
    # The program comes first, after any VAR=value: `helm install modelplane ...`
    # names a release, and `modelplane check: ...` in a block is output.
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    if len(words) > 1 and words[0].rsplit("/", 1)[-1] == "modelplane":
        command, rest = words[1], words[2:]
        if not re.fullmatch(r"[a-z][a-z-]*", command):
            return None
    elif bare and len(words) > 1 and words[0] in cli_options():
        command, rest = words[0], words[1:]
    else:
        return None
    flags = [m.split("=", 1)[0] for w in rest for m in FLAG.findall(w.strip("[]"))]
    return command, flags


def _stale_flags(page: Page) -> list[str]:
    known = frozenset().union(*cli_options().values())
    problems = []
    texts = [(block, False) for block in page.code_blocks]
    texts += [(span, True) for span in page.code_spans]
    for text, bare in texts:
        for segment in _segments(text):
            found = _modelplane_invocation(segment, bare=bare)
            if found is not None:
                command, flags = found
                if command not in cli_options():
                    problems.append(f"`{segment}`: modelplane has no command {command}")
                    continue
                problems += [
                    f"`{segment}`: modelplane {command} has no {flag}"
                    for flag in flags
                    if flag not in cli_options()[command]
                ]
            elif bare:
                # A flag named on its own must be modelplane's or a listed other program's.
                problems += [
                    f"`{text}`: no modelplane command has {flag}"
                    for flag in FLAG.findall(text)
                    if flag.startswith("--") and flag not in known | FOREIGN_FLAGS
                ]
    return problems


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_modelplane_flag_the_docs_name_exists(path: Path) -> None:
    problems = _stale_flags(read(path))
    assert not problems, f"{read(path).name}: " + "; ".join(problems)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_flags_are_named_in_code_where_the_check_reads_them(path: Path) -> None:
    # A flag in plain prose would escape the check above.
    bare = [flag for text in read(path).prose for flag in re.findall(r"(?<![\w-])--[a-z]\S*", text)]
    assert not bare, f"{read(path).name}: put {bare} in backticks"


def test_every_option_of_the_cli_is_named_in_the_docs() -> None:
    # The other way round: a new flag gets its line in the docs. Hidden ones
    # (deprecated spellings) need none; a flag counts under any of its names.
    named = {
        flag
        for path in PAGES
        for text in read(path).code_spans + read(path).code_blocks
        for flag in FLAG.findall(text)
    }
    group: Any = typer.main.get_command(app)
    undocumented = [
        f"modelplane {name} {param.opts[0]}"
        for name, command in group.commands.items()
        for param in command.params
        if param.param_type_name == "option"
        and not param.hidden
        and not named & {*param.opts, *param.secondary_opts}
    ]
    assert not undocumented, f"no page names {undocumented}"


def test_the_flag_check_catches_a_renamed_flag(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Run `modelplane run --resync 60`, `run --no-such-flag`, `--also-missing`.\n\n"
        "```sh\nmodelplane check --kubeconfig k.yaml \\\n  --stack Dynamo --timeout-all 5\n"
        "modelplane crds | kubectl apply -f -\nmodelplane frobnicate --x\n```\n"
    )
    problems = _stale_flags(read(page))
    assert any("modelplane run has no --no-such-flag" in p for p in problems)
    assert any("no modelplane command has --also-missing" in p for p in problems)
    assert any("modelplane check has no --timeout-all" in p for p in problems)
    assert any("modelplane has no command frobnicate" in p for p in problems)
    assert len(problems) == 4, problems


CHART_VALUES = ROOT / "deploy" / "chart" / "values.yaml"
# Other charts' values the docs name: cert-manager's, in Upgrading's why;
# and an annotation of prometheus-operator's CRDs that reads like one of ours.
FOREIGN_VALUES = {"crds.enabled", "crds.keep", "operator.prometheus.io/version"}


def _has_value(values: Any, path: list[str]) -> bool:
    for i, key in enumerate(path):
        if not isinstance(values, dict):
            return False
        if key in ("*", "<name>") or (not values and i > 0):
            # Any key of a map, or of one the chart leaves open (`labels: {}`).
            return True
        if key not in values:
            return False
        values = values[key]
    return True


def _value_names(page: Page, top: set[str]) -> list[str]:
    """Chart value paths a page names: `a.b` spans and `--set a.b=...` of helm commands."""
    names = [span for span in page.code_spans if "." in span and " " not in span]
    for block in page.code_blocks:
        names += re.findall(r"--set\s+'?([\w.]+)=", block)
    return [
        name.split("=", 1)[0]
        for name in names
        if name.split(".", 1)[0] in top and name.split("=", 1)[0] not in FOREIGN_VALUES
    ]


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_chart_value_the_docs_name_exists(path: Path) -> None:
    values = yaml.safe_load(CHART_VALUES.read_text())
    names = _value_names(read(path), set(values))
    missing = [name for name in names if not _has_value(values, name.split("."))]
    assert not missing, f"{read(path).name} names chart values {CHART_VALUES.name} lacks: {missing}"


def test_the_value_check_catches_a_renamed_value() -> None:
    values = {
        "operator": {"resync": 300, "chartRepositoryFor": {}},
        "prometheusRule": {"for": {"a": 1}},
    }
    assert _has_value(values, ["operator", "resync"])
    assert _has_value(values, ["operator", "chartRepositoryFor", "anything"])
    assert _has_value(values, ["prometheusRule", "for", "<name>"])
    assert not _has_value(values, ["operator", "resyncSeconds"])
    assert not _has_value(values, ["operator", "resync", "deeper"])


def test_every_reason_a_stack_is_blocked_with_is_in_troubleshooting() -> None:
    spans = set(read(DOCS / "troubleshooting.md").code_spans)
    missing = [reason.value for reason in BlockedReason if reason.value not in spans]
    assert not missing, f"docs/troubleshooting.md does not list {missing}"
