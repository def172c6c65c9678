"""helm runs in a process group of its own, and nothing of it outlives the run that started it.

The helm here is a script that starts a child (as a plugin or a
post-renderer would) and waits on it; the tests look at the processes of
its group in /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.waiting import wait_for, wait_for_async

from modelplane.actions.helm import Helm, HelmError, TargetHelm
from modelplane.kube.address import DEFAULT_DENIED

KUBECONFIG = textwrap.dedent(
    """\
    apiVersion: v1
    kind: Config
    clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
    users: [{name: u, user: {token: t}}]
    contexts: [{name: x, context: {cluster: c, user: u}}]
    current-context: x
    """
)


def _fake_helm(tmp: Path) -> Path:
    """A helm that writes "<its pid> <its child's pid>" to pids-<verb>, then waits on the child."""
    script = tmp / "helm"
    script.write_text(
        "#!/bin/sh\n"
        "sleep 600 &\n"
        f'echo "$$ $!" > {tmp}/pids-$1.tmp\n'
        f"mv {tmp}/pids-$1.tmp {tmp}/pids-$1\n"
        "wait\n"
    )
    script.chmod(0o755)
    return script


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of a process, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[2])


def _alive_in_group(pgid: int) -> list[int]:
    """The processes of the group that still run (a zombie no longer does)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[1] == pgid and stat[0] != "Z":
                out.append(int(entry.name))
    return out


@contextlib.contextmanager
def _no_strays(tmp: Path) -> Iterator[None]:
    """Whatever a test asserts, kill what the fake helms started, so none outlives it."""
    try:
        yield
    finally:
        for pids in tmp.glob("pids-*"):
            for pid in (int(p) for p in pids.read_text().split()):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


async def _started(tmp: Path, verb: str) -> tuple[int, int]:
    pids = tmp / f"pids-{verb}"

    async def written() -> bool:
        return pids.exists()

    await wait_for_async(f"the fake helm {verb} to start", written, deadline=30)
    helm_pid, child = (int(p) for p in pids.read_text().split())
    return helm_pid, child


async def _ended(run: asyncio.Future[object]) -> None:
    # Bounded: a run whose group was not killed waits for ever on the pipes
    # helm's child holds open.
    done, _ = await asyncio.wait({run}, timeout=30)
    assert run in done, "the run did not end: something of helm's group still runs"


async def test_cancelling_a_run_kills_helm_and_what_it_started(tmp_path: Path) -> None:
    with _no_strays(tmp_path):
        helm = Helm(str(_fake_helm(tmp_path)), tmp_path)
        run = asyncio.create_task(helm.run("install", kubeconfig=KUBECONFIG))
        helm_pid, child = await _started(tmp_path, "install")
        # helm leads a group of its own, not the operator's, and its child is in it.
        assert os.getpgid(helm_pid) == helm_pid != os.getpgid(0)
        assert _alive_in_group(helm_pid) == sorted([helm_pid, child])
        assert len(helm.groups) == 1

        run.cancel()
        await _ended(run)
        with pytest.raises(asyncio.CancelledError):
            run.result()
        # helm itself was reaped before the run gave up; its child may linger as
        # a zombie until init reaps it, but runs no more.
        assert _stat(helm_pid) is None
        wait_for("the group to be gone", lambda: not _alive_in_group(helm_pid), deadline=30)
        assert len(helm.groups) == 0


async def test_a_run_the_caller_times_out_leaves_no_process(tmp_path: Path) -> None:
    with _no_strays(tmp_path):
        helm = Helm(str(_fake_helm(tmp_path)), tmp_path)

        async def upgrade() -> None:
            async with asyncio.timeout(None) as deadline:
                run = asyncio.ensure_future(helm.run("upgrade", kubeconfig=KUBECONFIG))
                await _started(tmp_path, "upgrade")
                # The deadline passes now, while helm and its child run.
                deadline.reschedule(asyncio.get_running_loop().time())
                await run

        timed_out = asyncio.ensure_future(upgrade())
        await _ended(timed_out)
        with pytest.raises(TimeoutError):
            timed_out.result()
        helm_pid, _ = (int(p) for p in (tmp_path / "pids-upgrade").read_text().split())
        wait_for("the group to be gone", lambda: not _alive_in_group(helm_pid), deadline=30)


async def test_kill_running_ends_every_group_of_every_copy(tmp_path: Path) -> None:
    with _no_strays(tmp_path):
        # The operator runs helm through TargetHelm.guarding(helm) and kills
        # through either: they share one set of groups.
        helm = Helm(str(_fake_helm(tmp_path)), tmp_path)
        guarded = TargetHelm.guarding(helm, DEFAULT_DENIED)
        runs = [
            asyncio.create_task(guarded.run("install", kubeconfig=KUBECONFIG)),
            asyncio.create_task(guarded.run("rollback", kubeconfig=KUBECONFIG)),
        ]
        groups = [(await _started(tmp_path, verb))[0] for verb in ("install", "rollback")]
        assert sorted(helm.groups) == sorted(groups)

        helm.kill_running()

        for run in runs:
            await _ended(run)
            # SIGKILLed helm exits non-zero: the run fails as a helm failure.
            with pytest.raises(HelmError):
                run.result()
        for pgid in groups:
            wait_for(
                "the group to be gone", lambda pgid=pgid: not _alive_in_group(pgid), deadline=30
            )
        assert len(helm.groups) == 0


def _exit_while_helm_runs(tmp: Path, exit_call: str) -> tuple[int, int]:
    """Start helm in a child Python, end it with ``exit_call``; the pids of helm and its child.

    exit_now ends the process at once (os._exit), so it cannot run in the
    test's own process.
    """
    program = textwrap.dedent(
        f"""
        import asyncio, functools, os, pathlib
        from modelplane.actions.helm import Helm
        from modelplane.operator.leader import exit_now

        async def main():
            helm = Helm({str(_fake_helm(tmp))!r}, pathlib.Path({str(tmp)!r}))
            asyncio.create_task(helm.run("install", kubeconfig={KUBECONFIG!r}))
            pids = pathlib.Path({str(tmp)!r}) / "pids-install"
            while not pids.exists():
                await asyncio.sleep(0.05)
            {exit_call}

        asyncio.run(main())
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    replica = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, timeout=60, check=False
    )
    assert replica.returncode == 1, replica.stderr.decode()
    helm_pid, child = (int(p) for p in (tmp / "pids-install").read_text().split())
    return helm_pid, child


def test_a_replica_that_steps_down_leaves_no_helm_running(tmp_path: Path) -> None:
    with _no_strays(tmp_path):
        # As the operator's Elector steps down.
        helm_pid, _ = _exit_while_helm_runs(tmp_path, "exit_now(helm.kill_running)")
        wait_for("helm's group to be gone", lambda: not _alive_in_group(helm_pid), deadline=30)


def test_without_the_kill_an_exit_leaves_helm_running(tmp_path: Path) -> None:
    with _no_strays(tmp_path):
        # The control for the test above: helm's own session keeps it out of
        # reach of whatever ends the operator's process.
        helm_pid, child = _exit_while_helm_runs(tmp_path, "exit_now()")
        assert _alive_in_group(helm_pid) == sorted([helm_pid, child])
