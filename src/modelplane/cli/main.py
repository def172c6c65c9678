"""Entry point of the ``modelplane`` command."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer
import yaml

from modelplane.api.crd import servingstack_crd
from modelplane.api.models import ServingStack
from modelplane.cli import render as present
from modelplane.cli.inputs import InputError, load_yaml, parse
from modelplane.cli.options import (
    ImagePullSecret,
    ImageRegistryMirror,
    StackFile,
    source_options,
)
from modelplane.cli.output import fail, output_option
from modelplane.pins import Stack
from modelplane.plan import Observed, plan

app = typer.Typer(
    name="modelplane",
    help="Install and verify the serving substrate for AI inference on Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


class RenderFormat(enum.StrEnum):
    TEXT = "text"
    YAML = "yaml"
    JSON = "json"


@app.command()
def render(
    file: StackFile,
    observed: Annotated[
        Path | None,
        typer.Option(
            "--observed",
            help="Facts about the target (YAML or JSON), as the "
            "operator observes them. Without it, nothing is observed.",
        ),
    ] = None,
    output: Annotated[RenderFormat, output_option()] = RenderFormat.TEXT,
    image_registry_mirror: ImageRegistryMirror = None,
    image_pull_secret: ImagePullSecret = None,
) -> None:
    """Print everything that would be installed and applied, offline."""
    sources = source_options(
        image_registry_mirror=image_registry_mirror, image_pull_secret=image_pull_secret
    ).sources()
    try:
        stack = parse(ServingStack, load_yaml(file), str(file))
        facts = parse(Observed, load_yaml(observed) or {}, str(observed)) if observed else None
    except InputError as err:
        fail(str(err))
    p = plan(stack, facts, sources)
    if output is RenderFormat.JSON:
        print(present.to_json(p))
    elif output is RenderFormat.YAML:
        print(present.to_yaml(p), end="")
    else:
        present.print_text(p, present.text_console(), observed=facts is not None)


@app.command()
def crds() -> None:
    """Print the CustomResourceDefinitions to apply on the hub."""
    print(yaml.safe_dump(servingstack_crd(), sort_keys=False), end="")


@app.command()
def requirements(
    stack: Annotated[Stack | None, typer.Option("--stack", help="Only this stack.")] = None,
) -> None:
    """Print the requirements reference, generated from the catalog, as Markdown."""
    from modelplane.catalog.reference import requirements_markdown

    print(requirements_markdown(stack), end="")


from modelplane.cli.run import run as _run  # noqa: E402

app.command("run")(_run)

from modelplane.cli.check import check as _check  # noqa: E402

app.command("check")(_check)

from modelplane.cli.diff import diff_command as _diff  # noqa: E402

app.command("diff")(_diff)

from modelplane.cli.mirror_images import mirror_images as _mirror_images  # noqa: E402

app.command("mirror-images")(_mirror_images)

from modelplane.cli.apply import apply as _apply  # noqa: E402
from modelplane.cli.apply import delete as _delete  # noqa: E402

app.command("apply")(_apply)
app.command("delete")(_delete)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
