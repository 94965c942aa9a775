"""tinygrad's CPU compiler through kcache, without editing tinygrad's files.

tinygrad's CPU device renders each kernel as C (``ClangRenderer``) and compiles it with
``ClangCompiler.compile(src) -> bytes``: clang's ELF relocatable object, which tinygrad's own
loader maps. :func:`install` makes ``ClangRenderer`` build :class:`KcacheClangCompiler`
instead, whose ``compile`` goes through :class:`kcache.ObjectCompiler`:

- kernels are keyed canonically: where tinygrad renders one kernel under another name
  (``E_4`` and ``E_4n1``, BEAM's ``test``), it is compiled once and the object compiled under
  the first name is handed back (tinygrad's loader runs an object from its start, so the
  name inside it does not matter);
- objects are kept in kcache's persistent kernel store (a directory, shared safely by
  concurrent processes), so a second process compiles nothing.

Use it either way::

    import kcache.tinygrad
    kcache.tinygrad.install("/path/to/store")   # before the CPU device compiles
    from tinygrad import Tensor
    print((Tensor([1.0, 2.0]) + 1).tolist())

or, for a program you do not edit, through the environment and the launcher (no
``sitecustomize``, no ``.pth``)::

    KCACHE_TINYGRAD=/path/to/store python -m kcache.tinygrad your_script.py args...
    KCACHE_TINYGRAD=/path/to/store python -m kcache.tinygrad -m pytest test/test_tiny.py

**The compiler command is tinygrad's own**: it is read from tinygrad's ``ClangCompiler``
(its ``compile`` is run once against a stand-in for ``subprocess`` that records the command
instead of running it), so the flags kcache compiles with, and keys by, are exactly the ones
tinygrad would have used (``$CC``, ``-march=native`` ... ), minus the input and output words
(``- -o -``) that kcache names itself. A command kcache refuses (see
``kcache.ObjectCompiler``) raises when the compiler is made.

**tinygrad's own compile cache** (its ``diskcache`` table ``compile_clang_obj_*`` in
``CACHEDB``, keyed by the exact source) is off for this compiler (``cachekey`` is ``None``):
kcache's store replaces it, so every compile tinygrad asks for is answered (and counted) by
kcache, and objects are not kept twice. tinygrad's other caches (BEAM results in
``beam_search``, its schedule caches) are untouched; set ``IGNORE_BEAM_CACHE=1`` to make a
BEAM search run (and compile) again.

**Worker processes**: tinygrad's BEAM search compiles in a pool of spawned processes
(``PARALLEL``), which rebuild the renderer (and so its compiler) from its target. :func:`install`
wraps the pool's initializer (``tinygrad.engine.worker._init_worker``) so that each worker
installs kcache over the same store first: workers compile through kcache too, sharing the
store on disk. A pool tinygrad made before :func:`install` keeps its own compiler.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from typing import Optional

from tinygrad.runtime.support import compiler_cpu as _compiler_cpu

from kcache import ObjectCompiler

__all__ = ["install", "uninstall", "KcacheClangCompiler", "compiler_for", "stats", "ENV_VAR", "LOG_VAR"]

#: The environment variable naming a file to which every compile of every process (tinygrad's
#: workers too) appends one line ``<pid> compiled|from_store|from_memory <name> <key>`` (for
#: tests and benchmarks that count compiles across processes).
LOG_VAR = "KCACHE_TINYGRAD_LOG"

#: The environment variable naming the store directory (read by :func:`install` when it is
#: given no store, and by ``python -m kcache.tinygrad``).
ENV_VAR = "KCACHE_TINYGRAD"

_lock = threading.Lock()
_compilers: dict = {}
#: tinygrad's own compiler class, as this module found it.
_original = _compiler_cpu.ClangCompiler
_store: Optional[str] = None
_log: Optional[str] = os.environ.get(LOG_VAR) or None


def _log_line(line: str) -> None:
    """Appends ``line`` to the ``$KCACHE_TINYGRAD_LOG`` file (one ``write`` in append mode:
    lines of concurrent processes do not interleave)."""
    fd = os.open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def compiler_for(store: Optional[str], argv: list) -> ObjectCompiler:
    """The process's one :class:`kcache.ObjectCompiler` for ``store`` and ``argv`` (made on
    first use): every tinygrad compiler of one command in this process shares its in-memory
    cache and counts."""
    key = (store, tuple(argv))
    with _lock:
        found = _compilers.get(key)
        if found is None:
            found = ObjectCompiler(store, list(argv))
            _compilers[key] = found
        return found


def stats() -> dict:
    """The counts of every kcache compiler of this process, summed: ``compiled`` (the
    compiler ran), ``from_store`` (loaded from the kernel store), ``from_memory`` (answered
    from the in-memory cache: a repeat or a renamed twin)."""
    out = {"compiled": 0, "from_store": 0, "from_memory": 0}
    with _lock:
        compilers = list(_compilers.values())
    for c in compilers:
        for k, v in c.stats.items():
            out[k] = out.get(k, 0) + v
    return out


def _tinygrad_argv(compiler) -> list:
    """The command tinygrad's ``ClangCompiler.compile`` runs, without its input and output
    words: read by running that method against a recording stand-in for ``subprocess``."""
    seen = []

    class _Recorder:
        @staticmethod
        def check_output(args, **_kwargs):
            seen.append(list(args))
            return b""

    real = _compiler_cpu.subprocess
    with _lock:
        _compiler_cpu.subprocess = _Recorder
        try:
            _original.compile(compiler, "")
        finally:
            _compiler_cpu.subprocess = real
    if len(seen) != 1 or seen[0][-3:] != ["-", "-o", "-"]:
        raise RuntimeError(
            f"kcache.tinygrad: tinygrad's ClangCompiler ran {seen!r}, not one command ending in "
            "'- -o -' (another tinygrad version?): not routed through kcache"
        )
    return [str(w) for w in seen[0][:-3]]


class KcacheClangCompiler(_compiler_cpu.ClangCompiler):
    """tinygrad's ``ClangCompiler`` whose ``compile`` goes through kcache (see the module's
    docs), over the store :func:`install` named when it was made; tinygrad's own compile cache
    is off for it."""

    def __init__(self, arch, cachekey="compile_clang_obj"):
        super().__init__(arch, cachekey)
        self.kcache_store = _store
        self.kcache_argv = _tinygrad_argv(self)
        self.kcache = compiler_for(self.kcache_store, self.kcache_argv)
        # kcache's store replaces tinygrad's diskcache for this compiler.
        self.cachekey = None

    def compile(self, src: str) -> bytes:
        if _log is None:
            return self.kcache.compile(src)
        before = self.kcache.stats
        obj = self.kcache.compile(src)
        after = self.kcache.stats
        moved = [k for k in after if after[k] != before.get(k)]
        names = re.findall(r"\bvoid\s+(\w+)\s*\(", src)
        name = names[-1] if names else "-"
        key = self.kcache.key(src, name) if names else "-"
        _log_line(f"{os.getpid()} {moved[0] if moved else 'none'} {name} {key}\n")
        return obj

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("kcache", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.kcache = compiler_for(self.kcache_store, self.kcache_argv)


def install(store: Optional[str] = None) -> type:
    """Routes tinygrad's CPU compiles through kcache, keeping objects in the kernel store at
    ``store`` (a directory; default: ``$KCACHE_TINYGRAD``; ``None`` with the variable unset:
    an in-memory cache only). Patches ``tinygrad.runtime.support.compiler_cpu.ClangCompiler``
    (the class ``ClangRenderer`` builds its compiler from) and swaps the compiler of a CPU
    device's renderers already made. Returns the compiler class. Calling it again changes the
    store for compilers made afterwards."""
    global _store
    if store is None:
        store = os.environ.get(ENV_VAR) or None
    if store is not None:
        store = os.path.abspath(store)
        os.makedirs(store, exist_ok=True)
    _store = store
    _compiler_cpu.ClangCompiler = KcacheClangCompiler
    _wrap_worker_init(store)
    _swap_open_devices()
    return KcacheClangCompiler


def _worker_init(store: Optional[str]) -> None:
    """A tinygrad worker's initializer: tinygrad's own, then :func:`install` over ``store``."""
    from tinygrad.engine import worker

    getattr(worker, "_kcache_original_init", worker._init_worker)()
    install(store)


def _wrap_worker_init(store: Optional[str]) -> None:
    """Makes tinygrad's compile workers install kcache over ``store`` when they start (the
    initializer is pickled by name: a partial of this module's function)."""
    import functools

    from tinygrad.engine import worker

    if not hasattr(worker, "_kcache_original_init"):
        worker._kcache_original_init = worker._init_worker
    worker._init_worker = functools.partial(_worker_init, store)


def uninstall() -> None:
    """Gives tinygrad its own ``ClangCompiler`` back (for compilers made afterwards)."""
    _compiler_cpu.ClangCompiler = _original
    from tinygrad.engine import worker

    original = getattr(worker, "_kcache_original_init", None)
    if original is not None:
        worker._init_worker = original


def _swap_open_devices() -> None:
    """Replaces the ``ClangCompiler`` of renderers tinygrad already made (a CPU device opened
    before :func:`install`)."""
    try:
        from tinygrad.device import Device
    except ImportError:
        return
    for name in list(getattr(Device, "_opened_devices", ())):
        try:
            dev = Device[name]
        except Exception:  # noqa: BLE001 - a device that does not open has no renderer
            continue
        for renderer in list(getattr(dev, "cached_renderer", {}).values()):
            c = getattr(renderer, "compiler", None)
            target = getattr(renderer, "target", None)
            if c is not None and type(c) is _original and target is not None:
                renderer.compiler = KcacheClangCompiler(target.arch.split(","))


def _main(argv: list) -> None:
    """``python -m kcache.tinygrad [-m module | script] args...``: :func:`install` from
    ``$KCACHE_TINYGRAD``, then runs the script or module as ``python`` would."""
    import runpy

    if not argv:
        sys.exit("usage: python -m kcache.tinygrad [-m module | script.py] [args...]")
    install()
    if argv[0] == "-m" and len(argv) >= 2:
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    # Through the importable module, so that what tinygrad pickles for its workers
    # (``_worker_init``) is found as ``kcache.tinygrad._worker_init`` there.
    from kcache import tinygrad as _module

    _module._main(sys.argv[1:])
