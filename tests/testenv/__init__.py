"""Integration-test environment: a real kube-apiserver, etcd and helm on loopback."""

from tests.testenv.env import (
    BINARIES,
    TESTBIN_KEY,
    TestbinMissingError,
    TestEnv,
    TestEnvError,
    cache_root,
    find_binaries,
    helm_environ,
    resolve_bin_dir,
)

__all__ = [
    "BINARIES",
    "TESTBIN_KEY",
    "TestEnv",
    "TestEnvError",
    "TestbinMissingError",
    "cache_root",
    "find_binaries",
    "helm_environ",
    "resolve_bin_dir",
]
