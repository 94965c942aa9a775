"""Helpers of the tinygrad tests (a module of its own name: the package's tests have their own
`conftest`): run Python in a child process as a tinygrad user would, with or without kcache,
and read the compile log kcache.tinygrad writes (KCACHE_TINYGRAD_LOG)."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"


def require_tinygrad() -> None:
    try:
        import tinygrad  # noqa: F401
    except ImportError as e:  # pragma: no cover - the failure is the point
        pytest.fail(f"tinygrad is not installed in this Python ({sys.executable}): {e}; "
                    "pip install -r crates/kcache-py/requirements.txt")
    if shutil.which(os.environ.get("CC", "clang")) is None:
        pytest.fail("clang (tinygrad's CPU compiler, or $CC) is not on the PATH")


class Runner:
    """Runs Python in a child process as a tinygrad user would: `DEV=CPU`, a private
    `CACHEDB` (tinygrad's compile and BEAM cache database), and with kcache when a store is
    given (`KCACHE_TINYGRAD=<store>`, `KCACHE_TINYGRAD_LOG=<log>`, through
    `python -m kcache.tinygrad`)."""

    def __init__(self, tmp: pathlib.Path):
        self.tmp = tmp

    def env(self, store=None, log=None, cachedb=None, extra=None) -> dict:
        env = dict(os.environ)
        for k in ("KCACHE_TINYGRAD", "KCACHE_TINYGRAD_LOG", "BEAM", "DEBUG", "CACHELEVEL"):
            env.pop(k, None)
        env["DEV"] = "CPU"
        env["CACHEDB"] = str(cachedb or (self.tmp / "tinygrad-cache.db"))
        if store is not None:
            env["KCACHE_TINYGRAD"] = str(store)
        if log is not None:
            env["KCACHE_TINYGRAD_LOG"] = str(log)
        env.update(extra or {})
        return env

    def start(self, args, *, store=None, log=None, cachedb=None, extra=None, cwd=None):
        """Starts `python [-m kcache.tinygrad] args...` (kcache when `store` is given)."""
        cmd = [sys.executable]
        if store is not None:
            cmd += ["-m", "kcache.tinygrad"]
        cmd += [str(a) for a in args]
        return subprocess.Popen(cmd, env=self.env(store, log, cachedb, extra), cwd=cwd,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def run(self, args, **kw) -> str:
        """Runs it to its end; fails the test with its output when it fails."""
        p = self.start(args, **kw)
        out, _ = p.communicate(timeout=900)
        if p.returncode != 0:
            pytest.fail(f"{args} exited {p.returncode}:\n{out[-6000:]}")
        return out


def read_log(log: pathlib.Path) -> list:
    """The lines of a KCACHE_TINYGRAD_LOG file: (pid, outcome, name, key) each."""
    if not log.exists():
        return []
    return [tuple(line.split()) for line in log.read_text().splitlines() if line.strip()]


def outcomes(log: pathlib.Path) -> dict:
    """How many compiles of the log were compiled, from_store, from_memory."""
    out = {"compiled": 0, "from_store": 0, "from_memory": 0}
    for _, outcome, *_ in read_log(log):
        out[outcome] = out.get(outcome, 0) + 1
    return out
