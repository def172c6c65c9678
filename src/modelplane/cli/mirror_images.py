"""``modelplane mirror-images``: what the mirror must carry, as ``skopeo sync`` sources.

Offline, from the stack and the mirror rules, as ``render`` plans them:
one YAML source per destination (``plan.mirror_images.to_copy`` says why),
written to ``--dir`` with the commands that copy them printed, or printed
as one YAML stream, each document under a comment giving its command.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer
import yaml

from modelplane.api.models import ServingStack
from modelplane.cli.inputs import InputError, load_yaml, parse
from modelplane.cli.options import ImageRegistryMirror, StackFile, source_options
from modelplane.cli.output import fail
from modelplane.plan import plan
from modelplane.plan.mirror_images import SyncDocument, ToCopy, to_copy

SyncDir = Annotated[
    Path | None,
    typer.Option(
        "--dir",
        help="Write one skopeo sync YAML source per destination into this directory "
        "and print the commands that copy them; without it, print the sources.",
    ),
]


def mirror_images(
    file: StackFile,
    image_registry_mirror: ImageRegistryMirror = None,
    directory: SyncDir = None,
) -> None:
    """Print what the image mirror must carry, as skopeo sync YAML sources, offline."""
    sources = source_options(image_registry_mirror=image_registry_mirror).sources()
    if not sources.image_mirrors:
        fail("give the mirror rules (--image-registry-mirror FROM=TO): they say where each goes")
    try:
        stack = parse(ServingStack, load_yaml(file), str(file))
    except InputError as err:
        fail(str(err))
    wanted = to_copy(plan(stack, None, sources).images)
    if directory is None:
        print(stream(wanted), end="")
        return
    directory.mkdir(parents=True, exist_ok=True)
    for name, doc in zip(file_names(wanted.syncs), wanted.syncs, strict=True):
        path = directory / name
        path.write_text(yaml.safe_dump(doc.source, sort_keys=False))
        print(sync_command(str(path), doc))
    for source, moved in wanted.copies:
        print(copy_command(source, moved))


def sync_command(path: str, doc: SyncDocument) -> str:
    return f"skopeo sync --src yaml --dest docker {path} {doc.destination}"


def copy_command(source: str, moved: str) -> str:
    return f"skopeo copy docker://{source} docker://{moved}"


def file_names(syncs: list[SyncDocument]) -> list[str]:
    """``sync-<n>-<destination>.yaml``: in order, and named for a person."""
    return [
        f"sync-{i + 1}-{re.sub(r'[^a-z0-9.-]+', '-', doc.destination.lower())}.yaml"
        for i, doc in enumerate(syncs)
    ]


def stream(wanted: ToCopy) -> str:
    """Every source as one YAML stream, each under the command that copies it."""
    parts = [
        f"# {sync_command(name, doc)}\n" + yaml.safe_dump(doc.source, sort_keys=False)
        for name, doc in zip(file_names(wanted.syncs), wanted.syncs, strict=True)
    ]
    parts += [f"# {copy_command(source, moved)}\n" for source, moved in wanted.copies]
    return "---\n".join(parts)
