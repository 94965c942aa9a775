"""Shared fixtures of the kcache package's tests: the repository, the kernel corpus, and the
Rust programs the tests hold the package to (the `kcache` command, the kernel-store peer).

`cargo xtask test` sets KCACHE_CLI, KCACHE_PEER and KCACHE_CORPUS; run by hand, the paths
default to the workspace's debug build (`cargo build -p kcache-cli` and
`cargo build -p kcache-tests --example kernel_store_peer`) and ../shared/corpus. A missing Rust
program fails its tests (never skips); a missing corpus skips the corpus tests except under
CI, where it fails, as the Rust corpus tests do.
"""

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


def _program(env: str, default: pathlib.Path, build: str) -> pathlib.Path:
    path = pathlib.Path(os.environ.get(env, default))
    if not path.is_file():
        pytest.fail(f"{path} is not there (${env}); build it with `{build}`")
    return path


@pytest.fixture(scope="session")
def kcache_cli() -> pathlib.Path:
    """The `kcache` command-line tool (Rust)."""
    return _program("KCACHE_CLI", REPO / "target/debug/kcache", "cargo build -p kcache-cli")


@pytest.fixture(scope="session")
def peer() -> pathlib.Path:
    """The Rust kernel-store peer (tests/examples/kernel_store_peer.rs in the workspace)."""
    return _program(
        "KCACHE_PEER",
        REPO / "target/debug/examples/kernel_store_peer",
        "cargo build -p kcache-tests --example kernel_store_peer",
    )


@pytest.fixture(scope="session")
def corpus() -> pathlib.Path:
    """The kernel corpus directory (../shared/corpus, or $KCACHE_CORPUS)."""
    path = pathlib.Path(os.environ.get("KCACHE_CORPUS", REPO.parent / "shared/corpus"))
    if not (path / "README.md").is_file():
        why = f"the kernel corpus is not at {path} ($KCACHE_CORPUS names another)"
        if os.environ.get("CI", "") not in ("", "0", "false"):
            pytest.fail(why + "; CI does not pass without it")
        pytest.skip(why)
    return path
