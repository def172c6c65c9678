"""One stack's connection to its target: the credentials it was opened with, and the watches.

The daemon of a stack keeps one ``Target`` across reconciles and runs the
target watches on it, so a quiet resync reads neither the hub's Secrets
nor a second connection's discovery. When the Secrets are read again is a
decision (``plan.decisions.read_credentials``); this only carries it out,
and opens a new connection only when what it read differs. Without a
``wake`` (a test, a teardown) nothing is kept: the caller closes.

Where the credentials come from is the one thing a run without a hub
(``modelplane apply``) changes: it passes a ``CredentialSource`` that reads
the person's kubeconfig instead of the stack's Secrets; everything after
the read is the same.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from lightkube import AsyncClient

from modelplane.api.models import ServingStack
from modelplane.credentials.connect import Credentials, connect, read_credentials
from modelplane.credentials.identity.cache import TokenCache
from modelplane.kube.client import Target
from modelplane.observe.state import Wanted
from modelplane.observe.watches import WatchCache
from modelplane.operator.options import OperatorOptions
from modelplane.operator.watch import TargetWatcher
from modelplane.plan import decisions

# The credentials of a stack's target, from somewhere other than the hub.
CredentialSource = Callable[[ServingStack], Awaitable[Credentials]]


@dataclass
class TargetSession:
    # None with a ``source``: nothing is read from a hub.
    hub: AsyncClient | None
    options: OperatorOptions
    # Cloud identity tokens, shared by every connection of the operator.
    tokens: TokenCache = field(default_factory=TokenCache)
    # Called by the target watches when something on the target changed.
    wake: Callable[[], None] | None = None
    label: str = ""
    target: Target | None = None
    watcher: TargetWatcher | None = None
    # The credentials the target was opened with, and the spec generation
    # they were read for.
    credentials: Credentials | None = field(default=None, repr=False)
    read_for: int | None = None
    # Where the credentials come from instead of the stack's Secrets on the hub.
    source: CredentialSource | None = None

    @property
    def kept(self) -> bool:
        """Whether the connection outlives a reconcile (the daemon's) and carries watches."""
        return self.wake is not None

    @property
    def cache(self) -> WatchCache | None:
        """The target watches' copy, once they run."""
        return self.watcher.cache if self.watcher is not None else None

    async def connect(
        self,
        stack: ServingStack,
        generation: int | None,
        *,
        last_went_wrong: bool,
        direct_read_due: bool,
    ) -> Target:
        """The stack's target, opened anew only when its credentials are read and changed."""
        if self.target is not None and not decisions.read_credentials(
            connected=True,
            read_for_generation=self.read_for,
            generation=generation,
            last_went_wrong=last_went_wrong,
            direct_read_due=direct_read_due,
        ):
            return self.target
        credentials = await self.read(stack)
        self.read_for = generation
        if self.target is not None and credentials == self.credentials:
            return self.target
        await self.close()
        self.target = await self.open(credentials)
        self.credentials = credentials
        return self.target

    async def watch(self, want: Wanted) -> None:
        """Run the target watches on the stack's target, for what this spec needs."""
        assert self.wake is not None and self.target is not None
        watcher = self.watcher
        if watcher is not None and watcher.target is self.target and watcher.want == want:
            return
        if watcher is not None:
            await watcher.close()
        self.watcher = TargetWatcher(
            self.target,
            want,
            self.wake,
            label=self.label,
            watch_timeout=self.options.watch_timeout_seconds,
        )
        self.watcher.start()

    async def close(self) -> None:
        """Stop the target watches and close the connection to the target."""
        watcher, target = self.watcher, self.target
        self.watcher, self.target, self.credentials = None, None, None
        try:
            if watcher is not None:
                await watcher.close()
        finally:
            if target is not None:
                await target.close()

    async def read(self, stack: ServingStack) -> Credentials:
        """The Secrets ``spec.secrets`` names, from the hub (or the ``source``).

        Refusals are ``CredentialsError``.
        """
        if self.source is not None:
            return await self.source(stack)
        assert self.hub is not None, "a session reads its credentials from a hub or a source"
        return await read_credentials(
            self.hub,
            stack.spec,
            stack.metadata.namespace,
            cross_namespace_refs=not self.options.no_cross_namespace_refs,
        )

    async def open(self, credentials: Credentials) -> Target:
        """Open the target the credentials name, not kept: the caller closes it."""
        return await connect(
            credentials,
            allow_unsafe=self.options.allow_unsafe_kubeconfig,
            timeout=self.options.target_timeout_seconds,
            deny=self.options.deny_target_cidrs,
            tokens=self.tokens,
            endpoints=self.options.endpoints(),
        )
