"""The target connection of ``check``, ``diff``, ``apply`` and ``delete``, from their flags.

The kubeconfig file is read once: its one context (cluster, user and
context, with the files they name made absolute) becomes a self-contained
kubeconfig text, and that text alone is what every later step parses:
lightkube's config for ``check`` and ``diff``, the operator's vetted
connection for ``apply`` and ``delete``, and helm's private copy. The
identity file is read once too.

The kubeconfig is the person's own: its exec plugins and files are theirs
to use (``--allow-unsafe-kubeconfig`` is the operator's guard against a
Secret's author, not against the person running a command).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from lightkube.config.kubeconfig import KubeConfig, SingleConfig

from modelplane.api.models import ServingStack
from modelplane.api.spec import SecretType
from modelplane.cli.options import IDENTITY_TYPES, TargetOptions
from modelplane.credentials.connect import Credentials, Identity
from modelplane.credentials.identity import providers
from modelplane.credentials.identity.base import IdentityError, TargetInfo
from modelplane.credentials.identity.cache import TokenSource
from modelplane.kube.address import AddressDenied
from modelplane.kube.answers import describe_error
from modelplane.kube.client import ApiStatusError, Target, TargetError, open_target
from modelplane.untrusted import DEFAULT, UntrustedInputError, printable
from modelplane.untrusted import load_yaml as load_untrusted_yaml
from modelplane.wire import for_go

T = TypeVar("T")

# Far above any kubeconfig (a few KiB, or tens with many contexts); a
# bound, so a stray device or disk image is not read into memory.
MAX_KUBECONFIG_BYTES = DEFAULT.max_bytes
# Fields that name a file, relative to the kubeconfig's own directory (as
# kubectl reads them).
_CLUSTER_FILES = ("certificate-authority",)
_USER_FILES = ("client-certificate", "client-key", "tokenFile", "token-file")


class CommandError(Exception):
    """A usage or connection problem; the message is for a person."""


@dataclass(frozen=True)
class LocalTarget:
    """One target as the command line names it, read and checked before anything is sent."""

    # The one context, self-contained; it may hold the person's credentials.
    kubeconfig: str = field(repr=False)
    config: SingleConfig = field(repr=False)
    identity: Identity | None = None
    # Built from ``identity``, so a bad key is said before any request.
    tokens: TokenSource | None = field(default=None, repr=False)

    @property
    def server(self) -> str:
        return str(self.config.cluster.server)


def read_target(options: TargetOptions) -> LocalTarget:
    """Read the kubeconfig and the identity file, once each; refusals are ``CommandError``."""
    text, config = read_kubeconfig(options.kubeconfig, options.context)
    identity, tokens = _identity(options, config)
    return LocalTarget(text, config, identity, tokens)


def read_kubeconfig(path: Path, context: str | None) -> tuple[str, SingleConfig]:
    """The context of ``path`` to use, as a self-contained kubeconfig text and its config."""
    if not path.is_file():
        raise CommandError(f"kubeconfig {path} does not exist or is not a file")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_KUBECONFIG_BYTES + 1)
        doc = load_untrusted_yaml(data)
    except (OSError, UntrustedInputError) as err:
        raise CommandError(f"kubeconfig {path} cannot be read: {err}") from err
    if not isinstance(doc, dict):
        raise CommandError(f"kubeconfig {path} is not a YAML mapping")
    name = context or doc.get("current-context")
    if not name:
        raise CommandError(f"kubeconfig {path} has no current context: pass --context NAME")
    single = _one_context(doc, name, path)
    try:
        config = KubeConfig.from_dict(single, fname=path).get()
    except Exception as err:  # lightkube raises several kinds for a bad entry
        what = f"context {printable(name, 253)!r}" if context else "the current context"
        raise CommandError(f"kubeconfig {path}: {what} cannot be used: {err}") from err
    if config is None:
        raise CommandError(f"kubeconfig {path} has no current context: pass --context NAME")
    return for_go(single), config


def _one_context(doc: dict[str, Any], name: Any, path: Path) -> dict[str, Any]:
    ctx = _entry(doc, "contexts", "context", name, path)
    cluster = dict(_entry(doc, "clusters", "cluster", ctx.get("cluster"), path))
    user = dict(_entry(doc, "users", "user", ctx.get("user"), path))
    base = path.resolve().parent
    for fields, section in ((_CLUSTER_FILES, cluster), (_USER_FILES, user)):
        for f in fields:
            if isinstance(section.get(f), str) and section[f]:
                section[f] = str(base / Path(section[f]).expanduser())
    exec_ = user.get("exec")
    if isinstance(exec_, dict) and isinstance(exec_.get("command"), str):
        command = exec_["command"]
        # kubectl resolves a command with a path separator against the kubeconfig's directory.
        if "/" in command and not Path(command).is_absolute():
            user["exec"] = {**exec_, "command": str(base / command)}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": ctx["cluster"], "cluster": cluster}],
        "users": [{"name": ctx["user"], "user": user}],
        "contexts": [{"name": name, "context": ctx}],
        "current-context": name,
    }


def _entry(doc: dict[str, Any], section: str, inner: str, name: Any, path: Path) -> dict[str, Any]:
    entries = doc.get(section)
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(inner)
            if isinstance(value, dict):
                return value
    raise CommandError(f"kubeconfig {path} has no {inner} {printable(str(name), 253)!r}")


def _identity(
    options: TargetOptions, config: SingleConfig
) -> tuple[Identity | None, TokenSource | None]:
    name, path = options.identity_type, options.identity_file
    if name is None and path is None:
        return None, None
    if name is None or path is None:
        raise CommandError("--identity-type and --identity-file go together: give both, or neither")
    if name not in IDENTITY_TYPES:
        raise CommandError(
            f"--identity-type {printable(name, 80)!r} is not a cloud identity type "
            f"({', '.join(IDENTITY_TYPES)})"
        )
    kind = SecretType(name)
    make = providers.factory(kind)
    if make is None:
        raise CommandError(f"--identity-type {kind} is not supported by this version of modelplane")
    try:
        credential = path.read_bytes()
    except OSError as err:
        raise CommandError(f"--identity-file {path} cannot be read ({err.strerror})") from err
    info = TargetInfo(cluster_name=config.context.cluster, server=config.cluster.server)
    try:
        tokens = TokenSource(make(credential, info, options.endpoints))
    except IdentityError as err:
        raise CommandError(f"--identity-file {path}: {err.failure.value}: {err.message}") from None
    return Identity(kind, credential, f"--identity-file {path}"), tokens


@dataclass(frozen=True)
class LocalCredentials:
    """``apply``'s and ``delete``'s credentials: the person's, not the stack's Secrets."""

    kubeconfig: str = field(repr=False)
    identity: Identity | None = None

    async def __call__(self, stack: ServingStack) -> Credentials:
        return Credentials(self.kubeconfig, self.identity)


def credentials_of(target: LocalTarget) -> LocalCredentials:
    return LocalCredentials(target.kubeconfig, target.identity)


async def open_local(target: LocalTarget, options: TargetOptions, timeout: float) -> Target:
    """Connect to ``target`` under the deny list; with an identity, its first token is minted.

    The environment's proxies are not used (``trust_env=False``): the deny
    list judges the address the request goes to.
    """
    opened = await open_target(
        target.config,
        deny=options.deny,
        timeout=timeout,
        trust_env=False,
        identity=target.tokens,
    )
    if target.tokens is not None:
        try:
            # Say a key that gives no token as such, before any request.
            await target.tokens.token()
        except BaseException:
            await opened.close()
            raise
    return opened


def on_target(server: str, work: Coroutine[Any, Any, T], doing: str = "check") -> T:
    """Run ``work`` against the target at ``server``; every way it fails is a ``CommandError``."""
    try:
        return asyncio.run(work)
    except AddressDenied as err:
        raise CommandError(str(err)) from err
    except IdentityError as err:
        raise CommandError(
            f"the identity gave no token: {err.failure.value}: {err.message}"
        ) from None
    except ApiStatusError as err:
        if err.status in (401, 403):
            raise CommandError(
                f"the API server at {server} refused the credentials ({err.status} {err.reason})"
            ) from err
        raise CommandError(f"the API server at {server} answered {err}") from err
    except TargetError as err:
        raise CommandError(f"{err} ({server})") from err
    except Exception as err:  # exec plugins, TLS setup, timeouts: all "cannot connect"
        raise CommandError(
            f"cannot {doing} the cluster at {server}: {type(err).__name__}: {describe_error(err)}"
        ) from err
